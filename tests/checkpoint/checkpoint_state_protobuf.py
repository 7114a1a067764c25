#!/usr/bin/env python3
"""The state file with best-checkpoint scores, read by protobuf's own text-format parser.

TensorFlow's tf.train.get_checkpoint_state reads <dir>/checkpoint with
google.protobuf.text_format.Merge into its CheckpointState message
(tensorflow/python/training/checkpoint_state.proto). This test has checkpoint_helper train with
a BestCheckpointHook (--best 2), so that the state file holds '# runhooks-score' lines beside
'# runhooks-files', and parses it with that same parser and a CheckpointState built from the
proto's fields, without TensorFlow: every field is read, the comments are skipped.

  checkpoint_state_protobuf.py CHECKPOINT_HELPER

Exit 77 (SKIP) without the protobuf package.
"""
import os
import subprocess
import sys
import tempfile

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
except ImportError:
    print("SKIP: the protobuf package is not installed")
    sys.exit(77)


def checkpoint_state_class():
    # tensorflow/python/training/checkpoint_state.proto, field for field.
    f = descriptor_pb2.FileDescriptorProto(name="checkpoint_state.proto", package="tensorflow",
                                           syntax="proto3")
    m = f.message_type.add(name="CheckpointState")
    L = descriptor_pb2.FieldDescriptorProto
    for number, name, kind, label in [
            (1, "model_checkpoint_path", L.TYPE_STRING, L.LABEL_OPTIONAL),
            (2, "all_model_checkpoint_paths", L.TYPE_STRING, L.LABEL_REPEATED),
            (3, "all_model_checkpoint_timestamps", L.TYPE_DOUBLE, L.LABEL_REPEATED),
            (4, "last_preserved_timestamp", L.TYPE_DOUBLE, L.LABEL_OPTIONAL)]:
        m.field.add(name=name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.CheckpointState"))


def main():
    helper = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([helper, "--checkpoint-dir", tmp, "--steps", "20", "--save-steps", "7",
                              "--best", "2"], capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            print(run.stdout, run.stderr)
            return 1
        text = open(os.path.join(tmp, "checkpoint")).read()
        scores = [l for l in text.splitlines() if l.startswith("# runhooks-score: ")]
        if len(scores) != 2:
            print("expected 2 runhooks-score lines:\n" + text)
            return 1
        state = checkpoint_state_class()()
        text_format.Merge(text, state)
        named = list(state.all_model_checkpoint_paths)
        if state.model_checkpoint_path != "model.ckpt-20" or named[-1] != "model.ckpt-20":
            print("latest not read:\n" + str(state))
            return 1
        if len(state.all_model_checkpoint_timestamps) != len(named):
            print("timestamps not read:\n" + str(state))
            return 1
        for line in scores:
            name = line.split('"')[1]
            if name not in named:
                print("a scored checkpoint the state does not name: " + line)
                return 1
        print("protobuf's text_format reads the state: latest %s, %d checkpoints, %d scored (%s)"
              % (state.model_checkpoint_path, len(named), len(scores),
                 ", ".join(l.split('"')[1] for l in scores)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
