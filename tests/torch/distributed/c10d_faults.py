#!/usr/bin/env python3
"""The c10d engine with real processes: torchrun, real failures, real timeouts.

    c10d_faults.py CASE PYTHON PROGRAM

PYTHON is the interpreter whose torch package runs torchrun (`PYTHON -m torch.distributed.run`,
the same torch the program links); PROGRAM is tests/torch/distributed/c10d_worker. CASE is one of

  vote        3 workers: the stop vote under every rhythm, ChiefOnly, differing options
              (c10d_worker's own checks; every rank must print OK).
  state       2 workers: every rank holds the chief's state after creating its session.
  state-rank0-store
              the same with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: torchrun's agent shares no
              store (TORCHELASTIC_USE_AGENT_STORE=False) and rank 0 serves it.
  slow-chief  the chief is 3 s late, the collective timeout is 1 s, the workers wait up to 20 s:
              they get the state.
  late-chief  the chief is 30 s late, the workers wait at most 1 s: they fail naming
              ChiefStateOptions::max_wait_secs, and the job ends within seconds.
  throw       rank 1 throws at step 30 while rank 0 waits in the gradient allreduce: the error is
              printed with its rank, the job ends non-zero within the timeout.
  throw-caught
              the same, but rank 1's program catches the exception and returns: ~C10dEnvironment
              ends the job (the stop vote was left by an exception), well before the 30 s
              timeout would have.
  hang        rank 1 stops stepping (alive) at step 30 while rank 0 waits in the vote: rank 0
              fails after the collective timeout (2 s) naming its rank and the allreduce.
  restart     --max-restarts 1: rank 1 fails attempt 0 after the group connected; attempt 1
              (the same agent's store) connects and ends cleanly.
  global-step 4 workers: C10dGlobalStep's start value; increments from every rank hand out each
              value once; a store() racing with increments is linearizable; one store request
              per step of a session; waits end at their deadline or stop; bad options refused.
  global-step-waiter
              4 workers: GlobalStepWaiterHook on C10dGlobalStep: rank k starts once the global
              step reaches 100 k; a waiter wakes within milliseconds of the step being stored; a
              stopped coordinator and a timeout end the wait.
  global-step-store-gone
              the program alone as 2 processes, rank 0 serving the store
              (TORCHELASTIC_USE_AGENT_STORE=False): rank 0 ends while rank 1 waits for the step;
              rank 1 fails at once naming its rank, the read and the key.
  env         the program alone: no torchrun variables, or malformed ones: one error naming the
              variable (and its value) and saying to launch with torchrun.
  no-store    the program alone with torchrun's variables but no store at MASTER_PORT (as the
              agent's client, as rank 0's client) or no second rank (as the server): a clear
              error within the timeout (2 s).
  silent-store
              the program alone, its store a port that accepts and never answers: a listener
              that never reads, and a real TCPStore server frozen by SIGSTOP (as the agent's
              client, as rank 0's client): an error naming the rank, the address and the timeout
              (2 s) after about that long, where c10d's TCPStore waits for ever.
  port-in-use the program alone as rank 0 serving the store (TORCHELASTIC_USE_AGENT_STORE=False)
              with MASTER_PORT taken by another program: an error at once, naming the port's
              cause first, not a timeout.
  options     the program alone: options that name themselves in their errors.
Prints what it measured and exits non-zero on any failed claim.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from torchrun_support import TORCHRUN_VARIABLES, check, fail, free_port

BOUND_SECS = 60.0  # no case may take longer: a hang fails the test
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def run(command, env=None, timeout=BOUND_SECS):
    """(exit status, stdout and stderr merged, seconds): a hang past timeout fails the test."""
    print("$ " + " ".join(str(c) for c in command), flush=True)
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: no wait for a stray writer
        process = subprocess.Popen([str(c) for c in command], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, text=True, env=env,
                                   start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM first: torchrun forwards it to its workers (which it starts in sessions of
            # their own), then SIGKILL to whatever is left of the group.
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.seek(0)
            fail(f"no end within {timeout} s (a hang)", log.read())
        log.seek(0)
        output = log.read()
    # A job expected to fail must fail for its reason: a sanitizer's report after the expected
    # message would otherwise pass unseen (as in tests/mpi/mpi_faults.py).
    for line in output.splitlines():
        if any(m in line for m in SANITIZER_REPORTS):
            fail(f"a sanitizer reported: {line}", output)
    return process.returncode, output, time.monotonic() - start


def torchrun(python, program, nproc, args, extra_env=None, restarts=0):
    """The program as nproc workers of a torchrun job; a collective timeout of 10 s unless args
    set another, so that a broken build fails well within BOUND_SECS."""
    if "--timeout-secs" not in args:
        args = args + ["--timeout-secs", 10]
    env = dict(os.environ)
    env.update(extra_env or {})
    env["OMP_NUM_THREADS"] = "1"
    return run([python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", nproc,
                "--max-restarts", restarts, "--no-python", program] + args, env)


def alone(program, args, variables, timeout=BOUND_SECS):
    """The program without torchrun: its environment minus torchrun's variables, plus these."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES}
    env.update(variables)
    return run([program] + args, env, timeout)


def job_variables(**overrides):
    variables = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(free_port()), "TORCHELASTIC_RESTART_COUNT": "0",
                 "TORCHELASTIC_RUN_ID": "c10d-faults", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    variables.update(overrides)
    return variables


def stopped(output):
    return {int(m[1]): int(m[2]) for m in re.finditer(r"^rank (\d+) stopped at step (\d+)$",
                                                       output, re.M)}


def case_vote(python, program):
    code, output, secs = torchrun(python, program, 3, ["vote"])
    check(code == 0, f"torchrun exited with {code}", output)
    check("c10d_worker vote: OK" in output, "rank 0 did not report every rank's checks passed",
          output)
    for line in output.splitlines():
        if "stopped every rank" in line:
            print(line)
    print(f"3 workers, every rhythm: OK in {secs:.1f} s")


def case_state(python, program, extra_env=None, args=()):
    code, output, secs = torchrun(python, program, 2, ["state"] + list(args), extra_env)
    check(code == 0, f"torchrun exited with {code}", output)
    check("c10d_worker state: OK" in output, "not every rank held the chief's state", output)
    check(stopped(output) == {0: 47, 1: 47}, f"not every rank stopped at 47: {stopped(output)}",
          output)
    print(f"both ranks started from the chief's step 42, weight and 3 MB of bytes, and stopped at "
          f"step 47 ({secs:.1f} s)")


def case_state_rank0_store(python, program):
    case_state(python, program, {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})


def case_slow_chief(python, program):
    code, output, secs = torchrun(python, program, 2, ["slow-chief", "--timeout-secs", 1,
                                                       "--max-wait-secs", 20,
                                                       "--chief-delay-secs", 3])
    check(code == 0, f"torchrun exited with {code}: a wait for the chief longer than the "
                     f"collective timeout failed", output)
    check("c10d_worker slow-chief: OK" in output, "not every rank held the chief's state", output)
    print(f"a chief 3 s late with a 1 s collective timeout: every rank got its state "
          f"({secs:.1f} s)")


def case_late_chief(python, program):
    code, output, secs = torchrun(python, program, 2, ["late-chief", "--max-wait-secs", 1,
                                                       "--chief-delay-secs", 30])
    check(code != 0, "torchrun exited 0 although the worker gave up on the chief", output)
    expected = ("runhooks: rank 1 of 2: error: the chief (rank 0) sent no "
                "initial state within ChiefStateOptions::max_wait_secs = 1 s")
    check(expected in output, f"no '{expected}'", output)
    check(secs < 20.0, f"the job took {secs:.1f} s, not ended by the worker's wait", output)
    print(f"a chief 30 s late, a worker waiting at most 1 s: the job ended with exit {code} after "
          f"{secs:.1f} s (including start-up)")


def case_throw(python, program):
    code, output, secs = torchrun(python, program, 2, ["throw", "--timeout-secs", 5,
                                                       "--throw-rank", 1, "--throw-at-step", 30])
    check(code != 0, "torchrun exited 0 although rank 1 failed", output)
    expected = "runhooks: rank 1 of 2: error: injected failure at step 30; ending the job"
    check(expected in output, f"the error was not reported with its rank: no '{expected}'", output)
    check(re.search(r"rank\s*:\s*1 \(local_rank: 1\)\s+exitcode\s*:\s*1", output),
          "torchrun did not report rank 1's exit status 1", output)
    check(secs < 25.0, f"the job took {secs:.1f} s to end", output)
    print(f"rank 1 threw: reported with its rank, torchrun exited {code} after {secs:.1f} s "
          f"(including start-up)")


def case_throw_caught(python, program):
    code, output, secs = torchrun(python, program, 2, ["throw-caught", "--timeout-secs", 30,
                                                       "--throw-rank", 1, "--throw-at-step", 30])
    check(code != 0, "torchrun exited 0 although rank 1 left its vote by an exception", output)
    check("rank 1 caught: injected failure at step 30" in output, "the program's catch did not run",
          output)
    expected = ("runhooks: rank 1 of 2: a session with a StopVoteHook was left by an exception "
                "before end()")
    check(expected in output, f"no '{expected}'", output)
    check(secs < 25.0, f"the job took {secs:.1f} s to end (the timeout is 30 s)", output)
    print(f"rank 1 threw and its program caught it: ~C10dEnvironment ended the job, torchrun "
          f"exited {code} after {secs:.1f} s (including start-up)")


def case_hang(python, program):
    code, output, secs = torchrun(python, program, 2, ["hang", "--timeout-secs", 2,
                                                       "--throw-rank", 1, "--throw-at-step", 30])
    check(code != 0, "torchrun exited 0 although rank 1 hung", output)
    expected = "runhooks: rank 0 of 2: error: allreduce failed: "
    check(expected in output, f"rank 0 did not report its failed vote: no '{expected}'", output)
    check(re.search(r"[Tt]imed out", output), "the failure is not the timeout", output)
    check(secs < 25.0, f"the job took {secs:.1f} s to end with a 2 s timeout", output)
    print(f"rank 1 hung: rank 0's vote failed after the 2 s timeout, torchrun exited {code} after "
          f"{secs:.1f} s (including start-up)")


def case_restart(python, program):
    code, output, secs = torchrun(python, program, 2, ["restart"], restarts=1)
    check(code == 0, f"torchrun exited with {code}: attempt 1 failed", output)
    check("runhooks: rank 1 of 2: failing attempt 0 on purpose; ending the job" in output,
          "attempt 0 did not fail as planned", output)
    for rank in (0, 1):
        check(f"attempt 1: rank {rank} stopped at step 20" in output,
              f"rank {rank} did not finish attempt 1", output)
    check("c10d_worker restart: OK" in output, "attempt 1's checks failed", output)
    print(f"attempt 0 failed on rank 1; torchrun restarted the group on the same agent's store and "
          f"attempt 1 ended cleanly ({secs:.1f} s)")


def case_global_step(python, program):
    code, output, secs = torchrun(python, program, 4, ["global-step"])
    check(code == 0, f"torchrun exited with {code}", output)
    check("c10d_worker global-step: OK" in output, "rank 0 did not report every rank's checks "
          "passed", output)
    for line in output.splitlines():
        if line.startswith(("increments:", "store racing", "session:")):
            print(line)
    print(f"4 workers: start value, atomic increments, store racing with increments, one request "
          f"per step, waits: OK in {secs:.1f} s (including start-up)")


def case_global_step_waiter(python, program):
    code, output, secs = torchrun(python, program, 4, ["global-step-waiter"])
    check(code == 0, f"torchrun exited with {code}", output)
    check("c10d_worker global-step-waiter: OK" in output, "rank 0 did not report every rank's "
          "checks passed", output)
    firsts = {int(m[1]): (int(m[2]), int(m[3])) for m in re.finditer(
        r"^staggered start: rank (\d+) waited for step (\d+), first saw (-?\d+)", output, re.M)}
    check(sorted(firsts) == [0, 1, 2, 3], f"not every rank's start reported: {firsts}", output)
    for rank, (threshold, first) in firsts.items():
        check(first >= threshold, f"rank {rank} started at step {first}, before {threshold}",
              output)
    for line in output.splitlines():
        if line.startswith(("staggered start:", "wake latency")):
            print(line)
    print(f"4 workers, staggered start and wake-ups: OK in {secs:.1f} s (including start-up)")


def case_global_step_store_gone(python, program):
    port = str(free_port())
    def rank(r):
        return alone(program, ["global-step-store-gone", "--timeout-secs", 10],
                     job_variables(RANK=str(r), LOCAL_RANK=str(r), MASTER_PORT=port,
                                   TORCHELASTIC_USE_AGENT_STORE="False"))
    with ThreadPoolExecutor(2) as pool:
        (code0, output0, _), (code1, output1, secs) = pool.map(rank, (0, 1))
    output = output0 + output1
    check(code0 == 0 and "rank 0 ends, with the store it serves" in output0,
          f"rank 0 exited with {code0}", output)
    check(code1 == 1, f"rank 1 exited with {code1}, not 1", output)
    expected = ("runhooks: rank 1 of 2: error: the global step's read (add "
                "of 0) (key 'global_step/0') in the job's store failed: ")
    check(expected in output1, f"no '{expected}'", output)
    # c10d's TCPStore logs the lost connection itself (a warning with a backtrace): runhooks' own
    # report is the one line above.
    check(sum("runhooks:" in line for line in output1.splitlines()) == 1, "not one error line",
          output)
    check(secs < 15.0, f"rank 1 took {secs:.1f} s to fail", output)
    print(f"the store gone while rank 1 waited: rank 1 failed naming the read, after {secs:.1f} s "
          f"(including start-up)")


def case_env(python, program):
    hint = "; launch the program with torchrun, which sets it"
    cases = [
        ({}, "environment variable RANK is not set" + hint),
        (job_variables(WORLD_SIZE=None), "environment variable WORLD_SIZE is not set" + hint),
        (job_variables(RANK="abc"), "environment variable RANK='abc' is not an integer from 0 to "
                                    "1 (WORLD_SIZE=2 minus 1)" + hint),
        (job_variables(RANK="2"), "environment variable RANK='2' is not an integer from 0 to 1"),
        (job_variables(RANK=" 1"), "environment variable RANK=' 1' is not an integer"),
        (job_variables(WORLD_SIZE="0"), "environment variable WORLD_SIZE='0' is not an integer "
                                        "from 1 to"),
        (job_variables(LOCAL_RANK="-1"), "environment variable LOCAL_RANK='-1' is not an integer"),
        (job_variables(MASTER_ADDR=""), "environment variable MASTER_ADDR='' is not a host name"),
        (job_variables(MASTER_PORT="65536"), "environment variable MASTER_PORT='65536' is not an "
                                             "integer from 1 to 65535" + hint),
        (job_variables(TORCHELASTIC_RESTART_COUNT="x"),
         "environment variable TORCHELASTIC_RESTART_COUNT='x' is not an integer of at least 0"),
        (job_variables(TORCHELASTIC_RUN_ID=None),
         "environment variable TORCHELASTIC_RUN_ID is not set" + hint),
        (job_variables(TORCHELASTIC_USE_AGENT_STORE="true"),
         "environment variable TORCHELASTIC_USE_AGENT_STORE='true' is not True or False" + hint),
        (job_variables(GLOO_SOCKET_IFNAME="eth0,,lo"),
         "environment variable GLOO_SOCKET_IFNAME='eth0,,lo' is not a comma-separated list"),
    ]
    cases = [({k: v for k, v in variables.items() if v is not None}, expected)
             for variables, expected in cases]
    with ThreadPoolExecutor(4) as pool:  # each is a process start-up, most of its time
        results = list(pool.map(lambda case: alone(program, ["connect"], case[0]), cases))
    for (variables, expected), (code, output, secs) in zip(cases, results):
        check(code == 1, f"exit {code}, not 1, for {variables}", output)
        line = "runhooks: a process not yet in a c10d job: error: runhooks: " + expected
        check(line in output, f"no '{line}'", output)
        check(output.count("runhooks:") == 2 and len(output.strip().splitlines()) == 1,
              "not one error line", output)
        check(secs < 10.0, f"{secs:.1f} s to report a bad variable", output)
    print(f"{len(cases)} missing or malformed variables: one error each, naming it")


def case_no_store(python, program):
    cases = [
        (job_variables(), "runhooks: rank 1 of 2: error: cannot reach the job's store at "
                          "MASTER_ADDR:MASTER_PORT = 127.0.0.1:{port} (served by torchrun's "
                          "agent) within C10dOptions::timeout_secs = 2 s; is the program launched "
                          "by torchrun, and is MASTER_PORT its store's?"),
        (job_variables(TORCHELASTIC_USE_AGENT_STORE="False"),
         "runhooks: rank 1 of 2: error: cannot reach the job's store at MASTER_ADDR:MASTER_PORT = "
         "127.0.0.1:{port} (served by rank 0) within C10dOptions::timeout_secs = 2 s"),
        (job_variables(RANK="0", LOCAL_RANK="0", TORCHELASTIC_USE_AGENT_STORE="False"),
         "runhooks: rank 0 of 2: error: the job's store at MASTER_ADDR:MASTER_PORT = 127.0.0.1:{port}, "
         "served by this rank (TORCHELASTIC_USE_AGENT_STORE=False), was not joined by every rank "
         "within C10dOptions::timeout_secs = 2 s"),
    ]
    with ThreadPoolExecutor(len(cases)) as pool:  # at once: each waits for its 2 s timeout
        results = list(pool.map(
            lambda case: alone(program, ["connect", "--timeout-secs", 2], case[0]), cases))
    for (variables, expected), (code, output, secs) in zip(cases, results):
        expected = expected.format(port=variables["MASTER_PORT"])
        check(code == 1, f"exit {code}, not 1", output)
        check(expected in output, f"no '{expected}'", output)
        check(secs < 2.0 + 8.0, f"{secs:.1f} s to give up with a 2 s timeout", output)
        print(f"RANK={variables['RANK']} TORCHELASTIC_USE_AGENT_STORE="
              f"{variables['TORCHELASTIC_USE_AGENT_STORE']}: the error after {secs:.1f} s")


def case_silent_store(python, program):
    # A listener that accepts every connection and never reads from it (a wrong port: another
    # program's), and a real c10d store whose process is stopped (a frozen agent): the kernel
    # completes the connection for either, and nothing answers.
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []
    def accept():
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    frozen = subprocess.Popen(
        [python, "-c", "import sys, time; from torch.distributed import TCPStore; "
         "s = TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False); "
         "print(s.port, flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        frozen_port = int(frozen.stdout.readline())
        os.kill(frozen.pid, signal.SIGSTOP)
        cases = [("a listener that never reads", listener.getsockname()[1], "True",
                  "torchrun's agent"),
                 ("a listener that never reads", listener.getsockname()[1], "False", "rank 0"),
                 ("a stopped TCPStore server", frozen_port, "True", "torchrun's agent")]
        def attempt(case):
            _, port, agent, _ = case
            return alone(program, ["connect", "--timeout-secs", 2],
                         job_variables(MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE=agent),
                         timeout=30)
        with ThreadPoolExecutor(len(cases)) as pool:  # at once: each waits 4 s for nothing
            results = list(pool.map(attempt, cases))
        for (what, port, agent, served_by), (code, output, secs) in zip(cases, results):
            expected = (f"runhooks: rank 1 of 2: error: cannot reach the job's store at "
                        f"MASTER_ADDR:MASTER_PORT = 127.0.0.1:{port} (served by {served_by}) "
                        f"within C10dOptions::timeout_secs = 2 s; is the program launched by "
                        f"torchrun, and is MASTER_PORT its store's? (no answer: c10d's TCPStore "
                        f"was still waiting, as it does for ever on a port that accepts and never "
                        f"answers, such as a frozen store's); ending the job")
            check(code == 1, f"{what}: exit {code}, not 1", output)
            check(expected in output, f"{what}: no '{expected}'", output)
            check(2.0 <= secs < 2.0 + 8.0, f"{what}: {secs:.1f} s to give up with a 2 s timeout",
                  output)
            print(f"{what} at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE={agent}): the error after "
                  f"{secs:.1f} s")
    finally:
        frozen.kill()
        frozen.wait()
        listener.close()
        for connection in accepted:
            connection.close()


def case_port_in_use(python, program):
    with socket.create_server(("127.0.0.1", 0)) as taken:  # another program's, listening
        port = taken.getsockname()[1]
        code, output, secs = alone(program, ["connect", "--timeout-secs", 30],
                                   job_variables(RANK="0", LOCAL_RANK="0", MASTER_PORT=str(port),
                                                 TORCHELASTIC_USE_AGENT_STORE="False"))
    expected = (f"runhooks: rank 0 of 2: error: cannot serve the job's store at "
                f"MASTER_ADDR:MASTER_PORT = 127.0.0.1:{port} (this rank serves it: "
                f"TORCHELASTIC_USE_AGENT_STORE=False): ")
    check(code == 1, f"exit {code}, not 1", output)
    check(expected in output, f"no '{expected}'", output)
    check("address already in use" in output.split(expected, 1)[1].splitlines()[0],
          "the line does not name the cause (address already in use)", output)
    check("timeout" not in output.lower() and "within" not in output,
          "the port in use was reported as a timeout", output)
    check(secs < 10.0, f"{secs:.1f} s to report a port in use (the timeout is 30 s)", output)
    print(f"MASTER_PORT in use: the error after {secs:.1f} s, naming the cause")


def case_options(python, program):
    code, output, _ = run([program, "options"])
    check(code == 0 and "c10d_worker options: OK" in output, "an option's error is wrong", output)
    print("options name themselves in their errors")


CASES = {"vote": case_vote, "state": case_state, "state-rank0-store": case_state_rank0_store,
         "slow-chief": case_slow_chief, "late-chief": case_late_chief, "throw": case_throw,
         "throw-caught": case_throw_caught,
         "hang": case_hang, "restart": case_restart, "global-step": case_global_step,
         "global-step-waiter": case_global_step_waiter,
         "global-step-store-gone": case_global_step_store_gone, "env": case_env,
         "no-store": case_no_store, "silent-store": case_silent_store,
         "port-in-use": case_port_in_use, "options": case_options}


def main(argv):
    if len(argv) != 4 or argv[1] not in CASES:
        print(__doc__)
        return 2
    CASES[argv[1]](argv[2], argv[3])
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
