// The backend's side of checkpoints: the Checkpointable concept (save and restore under a file
// prefix) and the optional snapshot() that lets saves run on a background thread.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <filesystem>
#include <type_traits>

namespace runhooks {

// A backend whose whole training state can be written to files and read back.
//   Minimal complete definition:
//     void save(const std::filesystem::path& prefix) const
//         writes the state (parameters, optimizer state, global step, data position) to one or
//         more files whose names start with prefix, the prefix followed by nothing or by a
//         non-digit ("prefix.arrays"). It may throw; any I/O error must throw (FlatArrayWriter
//         does). The library fsyncs the files and commits them afterwards: save() needs neither
//         fsync nor a temporary name. Saving does not change the backend, hence const (every
//         example's); a non-const save() is accepted too.
//     void restore(const std::filesystem::path& prefix)
//         reads them back; a missing, torn or foreign file must throw, never leave garbage
//         (FlatArrayReader checks all of it first).
//   Semantics: restore(p) after save(p) gives a backend that continues exactly as the saved one
//   would have, global_step() included.
//   Models: examples/logistic_regression.hpp (LogisticRegression), tests/support/ checkpoint
//   backends.
template <class B>
concept Checkpointable = requires(B& backend, const std::filesystem::path& prefix) {
  backend.save(prefix);
  backend.restore(prefix);
};

// A Checkpointable backend that can also copy its state into a value and write that copy later:
//     Snapshot snapshot()     a copy of the state (cheap: memcpy of the arrays), taken on the
//                             training thread between steps;
//     snapshot.write(prefix)  what save(prefix) would have written, called on a background thread
//                             while training goes on. It must not touch the backend.
// CheckpointSaverHook saves such a backend asynchronously: a step pays only for snapshot().
template <class B>
concept Snapshottable = Checkpointable<B> && requires(B& backend) {
  { backend.snapshot() } -> std::move_constructible;
  requires requires(std::remove_cvref_t<decltype(backend.snapshot())>& snapshot,
                    const std::filesystem::path& prefix) { snapshot.write(prefix); };
};

namespace detail {

// One readable error when a checkpoint type meets a backend that cannot be checkpointed; the
// compiler's "required from" note names the backend. `User` names the hook or creator in the
// message (a string literal type cannot be a template argument, so each user has its own check).
template <class Backend>
struct check_checkpointable_for_saver {
  static_assert(Checkpointable<Backend>,
                "runhooks::CheckpointSaverHook needs a Checkpointable backend: add `void "
                "save(const std::filesystem::path& prefix) const` and `void restore(const "
                "std::filesystem::path& prefix)` to the backend type named in this instantiation "
                "(see <runhooks/checkpoint/checkpointable.hpp>).");
  static constexpr bool value = true;  // the assertion above is the one error
};

template <class Backend>
struct check_checkpointable_for_creator {
  static_assert(Checkpointable<Backend>,
                "runhooks::ChiefSessionCreator restores checkpoints and needs a Checkpointable "
                "backend: add `void save(const std::filesystem::path& prefix) const` and `void "
                "restore(const std::filesystem::path& prefix)` to the backend type named in this "
                "instantiation (see <runhooks/checkpoint/checkpointable.hpp>).");
  static constexpr bool value = true;  // the assertion above is the one error
};

}  // namespace detail
}  // namespace runhooks
