// The backend's side of checkpoints: the Checkpointable concept (save and restore under a file
// prefix) and the optional snapshots that let saves run on a background thread.
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

namespace detail {

// The type a backend's snapshots have: its nested `Snapshot` if it names one, else what its
// snapshot() returns.
template <class B>
struct snapshot_type {};
template <class B>
  requires requires(B& backend) { backend.snapshot(); } && (!requires { typename B::Snapshot; })
struct snapshot_type<B> {
  using type = std::remove_cvref_t<decltype(std::declval<B&>().snapshot())>;
};
template <class B>
  requires requires { typename B::Snapshot; }
struct snapshot_type<B> {
  using type = typename B::Snapshot;
};

template <class S>
concept WritableSnapshot = std::is_object_v<S> && requires(S& snapshot, const std::filesystem::path& prefix) {
  snapshot.write(prefix);
};

}  // namespace detail

// The type of B's snapshots (see SnapshottableInPlace); ill-formed for a backend without one.
template <class B>
using snapshot_t = typename detail::snapshot_type<B>::type;

// A Checkpointable backend that copies its state into a new value, written later.
//   Minimal complete definition:
//     Snapshot snapshot() const
//         a copy of the state, taken on the training thread between steps;
//     void Snapshot::write(const std::filesystem::path& prefix) const
//         what save(prefix) would have written, called on a background thread while training
//         goes on: it must not touch the backend.
//   Semantics: snapshot().write(p) then restore(p) continues as save(p) then restore(p) would,
//   from the step the snapshot was taken at.
//   Cost: the step pays for the copy, and a copy into fresh memory pays for mapping it: a
//   `Snapshot{parameters_, step_}` of 64 MiB costs about 4.5 times a memcpy into a buffer mapped
//   before (bench/checkpoint_stall.cpp, docs/checkpoints.md). SnapshottableInPlace removes that.
//   Models: examples/logistic_regression.hpp, tests/support/checkpoint_backends.hpp.
template <class B>
concept SnapshottableByValue = Checkpointable<B> && requires(B& backend) {
  { backend.snapshot() } -> std::move_constructible;
  requires detail::WritableSnapshot<std::remove_cvref_t<decltype(backend.snapshot())>>;
};

namespace detail {
// Whether snapshot() returns exactly the type of B's snapshots: the first one can then be made so.
template <class B>
concept makes_snapshot = SnapshottableByValue<B> && requires(B& backend) {
  { backend.snapshot() } -> std::same_as<snapshot_t<B>>;
};
}  // namespace detail

// A Checkpointable backend that fills a snapshot the library keeps: the refinement that makes a
// background save cost a memcpy into memory already mapped.
//   Minimal complete definition:
//     using Snapshot = ...;   (or the type snapshot() returns, when the backend has that too)
//         default-constructible (or made by snapshot() the first time), with
//         void write(const std::filesystem::path& prefix) const
//         as in SnapshottableByValue: called on a background thread, it must not touch the
//         backend;
//     void snapshot(Snapshot& into) const
//         overwrites `into` with a copy of the state, on the training thread between steps.
//         `into` holds the previous snapshot (or is new): reuse its memory (std::vector::assign,
//         Tensor::copy_ into tensors of the same shape) rather than making new buffers.
//   Semantics: as SnapshottableByValue: snapshot(s), s.write(p), restore(p) continues from the
//   step of snapshot(s), whatever the backend did after it.
//   What the library guarantees: CheckpointSaverHook owns one Snapshot for its lifetime and
//   hands the same object to every save; snapshot(into) is never called while a write of `into`
//   is in flight (at most one save is: WhenSaveInFlight), so a snapshot never needs a lock. The
//   first snapshot, at session creation (the hook saves there), allocates and maps the memory;
//   every later one finds it mapped.
//   Cost: the step pays for the copy into mapped memory; the state's size stays allocated
//   between saves.
//   Models: TorchBackend (<runhooks/torch/torch_backend.hpp>), bench/checkpoint_stall.cpp
//   (InPlaceModel), tests/support/checkpoint_backends.hpp (InPlaceBackend).
//   Example: docs/checkpoints.md, "Saves that do not stall training" (compiled and run by the
//   test `readme`).
template <class B>
concept SnapshottableInPlace = Checkpointable<B> && requires { typename snapshot_t<B>; } &&
                               detail::WritableSnapshot<snapshot_t<B>> &&
                               (std::default_initializable<snapshot_t<B>> ||
                                detail::makes_snapshot<B>) &&
                               requires(B& backend, snapshot_t<B>& into) { backend.snapshot(into); };

// A backend CheckpointSaverHook saves on a background thread: either form. With both, the
// in-place one is used (the by-value one only makes the first snapshot of a type that cannot be
// default-constructed).
template <class B>
concept Snapshottable = SnapshottableByValue<B> || SnapshottableInPlace<B>;

namespace detail {

// Whether B has a member named `snapshot`, whatever its signature (the trick of concepts.hpp:
// a name lookup that is ambiguous when B declares one).
struct snapshot_probe {
  void snapshot();
};
template <class B>
struct snapshot_probed : B, snapshot_probe {};
template <class B>
concept names_snapshot = std::is_class_v<B> && !std::is_final_v<B> &&
                         !requires { &snapshot_probed<B>::snapshot; };

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

// A backend member named snapshot that fits neither form would leave every save synchronous
// without a word: an error instead.
template <class Backend>
struct check_snapshot_for_saver {
  static_assert(!Checkpointable<Backend> || !names_snapshot<Backend> || Snapshottable<Backend>,
                "runhooks::CheckpointSaverHook: the backend's `snapshot` fits neither form of "
                "runhooks::Snapshottable, so its saves could not run in the background. Write "
                "`void snapshot(Snapshot& into) const` with a nested, default-constructible type "
                "`Snapshot` that has `void write(const std::filesystem::path& prefix) const` (or "
                "`Snapshot snapshot() const`); the backend type is named in this instantiation "
                "(see <runhooks/checkpoint/checkpointable.hpp>).");
  static constexpr bool value = true;
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
