"""What the torchrun test drivers of this folder share (c10d_faults.py, check_train_digits_ddp.py,
which import it from their own directory): torchrun's variables, failing with the output shown,
and a free port."""

import socket
import sys

# torchrun's own variables, removed from the environment of a program run alone.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID",
                      "TORCHELASTIC_USE_AGENT_STORE", "GLOO_SOCKET_IFNAME", "LOCAL_WORLD_SIZE",
                      "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE")


def fail(message, output=None):
    if output is not None:
        print("---- output ----\n" + output + "\n----------------")
    print("FAILED: " + message, flush=True)
    sys.exit(1)


def check(condition, message, output=None):
    if not condition:
        fail(message, output)


def free_port():
    """A port nobody listens on (bound, then closed, so the kernel just handed it out)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
