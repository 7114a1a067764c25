// Property test of deletion safety (issue 17): random checkpoint directories (runhooks'
// checkpoints, TensorFlow-written ones, foreign files sharing a prefix, symbolic links leading out,
// a subdirectory; issue 29: the user's files named like runhooks' temporaries, links planted at
// its temporaries' exact names, and a lock file planted as a link out, a dangling link, a hard
// link to a file outside or a directory) and random state files (relative, absolute and dotted
// spellings, un-stepped prefixes, "..", "", the directory itself, duplicates, pending deletions,
// recorded suffixes, hostile ones included), then a random run of opens, saves, closes and restarts, each save
// possibly killed at any file operation (durable_files.hpp's gate). After every step:
//   1. nothing outside the checkpoint directory changed;
//   2. no file of the directory was deleted or changed unless it is one checkpoint's own file by
//      the rule, computed here from how the case was generated (not by the code under test): a
//      name the first state file named, spelt as a plain name of this directory, followed by a
//      suffix recorded for it or, without a record, a TensorFlow or runhooks suffix; or a file a
//      save wrote; or a file or link at a name runhooks' temporaries have exactly (a staging file
//      .model.ckpt-<step>.tmp-<16 lowercase hex digits>..., checkpoint.tmp-<16>,
//      .runhooks-probe-<16>); the lock file is never changed, and a lock file that is a link or
//      a directory makes open() fail naming it;
//   3. the newest committed checkpoint (and so the one a restart restores from) is complete and
//      holds its step;
//   4. every checkpoint the state file names that a save wrote is complete;
//   5. (issue 27, item 2) with a ranking (best k by a score, some saves scored: NaN, +-inf, ties),
//      the state scores at most k checkpoints, each named by the state (and so complete by 4).
// Cases: RUNHOOKS_PROPERTY_CASES (default 10000), or max_success in RC_PARAMS, which wins.
// Directories live under /dev/shm when it exists (fsync is free there), else $TMPDIR or /tmp.
#include <rapidcheck.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <stdlib.h>
#include <sys/stat.h>

#include <runhooks/checkpoint/checkpoint_manager.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/log.hpp>

namespace fs = std::filesystem;

namespace {

// ---- The pools a case draws from ----

// Names a state file can give that are plain names of the directory: checkpoints of every kind,
// names that exist only as decoys, and the directory's own files.
const std::vector<std::string> own_names = {
    "model.ckpt",   "model.ckpt-1", "model.ckpt-2", "model.ckpt-3", "model.ckpt-10",
    "ckpt-1",       "ckpt-2",       "linked",       "checkpoint",   ".runhooks-lock",
    "notes",        ".model.ckpt-3.tmp-0123456789abcdef"};
// Entries that are not a checkpoint of the directory (the directory's path is substituted for %).
const std::vector<std::string> foreign_entries = {
    "",   ".", "..", "../", "../victim", "%/", "%", "sub/model.ckpt-2", "out/model.ckpt-5",
    "%/../victim", "%/sub/model.ckpt-2", "@/elsewhere/model.ckpt-5"};  // @: the parent
// Recorded suffixes, valid and not.
const std::vector<std::string> suffix_pool = {".arrays", ".json", "", "/../victim", "0.arrays",
                                              ".index", ".backup"};
const std::vector<std::string> tf_prefixes = {"model.ckpt", "model.ckpt-1", "model.ckpt-2", "ckpt-1",
                                              "ckpt-2"};
const std::vector<std::string> tf_suffixes = {".index", ".data-00000-of-00001", ".meta"};
const std::vector<std::int64_t> runhooks_steps = {1, 2, 3, 10};
const std::vector<std::string> decoys = {
    "model.ckpt.backup", "model.ckpt-notes.txt", "model.ckpt-1-old.arrays", "model.ckpt-10.arrays.bak",
    "notes.txt",         "ckpt-1.index.bak",     "events.out.tfevents.1",   "checkpoint.bak",
    "model.ckpt-3x",     "model.ckpt-2.json",    "model.ckpt-2",            "model.ckpt-4.arrays"};
const std::vector<std::string> outside_files = {"victim", "victim.index", "ckpt.index", "target.index"};
// The user's files named like runhooks' temporaries, none of them a name runhooks can have made.
const std::vector<std::string> user_temporaries = {
    "checkpoint.tmp-notes.txt",          "checkpoint.tmp-0123456789abcdef.bak",
    ".runhooks-probe-mine",              ".runhooks-probe-0123456789ABCDEF",
    ".model.ckpt-3.tmp-notes-for-later.txt", ".model.ckpt-3.tmp-0123456789abcde.arrays",
    ".model.ckpt-03.tmp-0123456789abcdef.arrays", ".model.ckpt-+3.tmp-0123456789abcdef.arrays"};
// Links at names runhooks' temporaries have exactly, leading out (under the parent).
const std::vector<std::pair<std::string, std::string>> temporary_links = {
    {"checkpoint.tmp-aaaaaaaaaaaaaaaa", "victim"},
    {".runhooks-probe-bbbbbbbbbbbbbbbb", "elsewhere"},
    {".model.ckpt-9.tmp-cccccccccccccccc.arrays", "victim.index"}};
// What stands at <dir>/.runhooks-lock before the first open.
enum class PlantedLock { none, link_out, dangling_link, hard_link_out, directory };
const std::vector<std::int64_t> save_steps = {1, 2, 3, 4, 10, 11};

struct Spelling {
  int name = 0;  // index into own_names, or into foreign_entries when foreign
  bool foreign = false;
  int form = 0;  // own names: 0 relative, 1 absolute, 2 absolute through "x/.."
};

struct StateSpec {
  std::vector<Spelling> entries;
  Spelling latest;  // own names only: a latest that names nothing is not this test's subject
  std::vector<Spelling> pending;
  std::map<int, std::vector<int>> recorded;  // own name index -> suffix_pool indexes
};

struct Op {
  enum Kind { save, close, restart } kind = save;
  std::int64_t step = 1;
  std::optional<int> kill_at;  // file operations allowed before the kill
  int max_to_keep = 2;
  bool every_n_hours = false;
  std::optional<double> score;  // with Case::top_k: the save's score
};

struct Case {
  std::vector<int> tf_checkpoints;      // tf_prefixes indexes
  std::vector<int> runhooks_checkpoints;  // runhooks_steps indexes
  std::vector<int> decoy_files;          // decoys indexes
  bool links = false, subdirectory = false, staging_leftover = false;
  std::vector<int> user_temporary_files;  // user_temporaries indexes
  bool temporary_dir = false;             // a directory at checkpoint.tmp-<16>, a file inside
  bool temporary_links = false;
  PlantedLock lock = PlantedLock::none;
  std::optional<StateSpec> state;
  int max_to_keep = 2;
  int top_k = -2;  // -2: no ranking; else CheckpointRanking::save_top_k (-1: all)
  std::vector<Op> ops;
};

void showValue(const Case& c, std::ostream& os) {
  os << "TensorFlow checkpoints:";
  for (int i : c.tf_checkpoints) os << " " << tf_prefixes[static_cast<std::size_t>(i)];
  os << "\nrunhooks checkpoints:";
  for (int i : c.runhooks_checkpoints) os << " model.ckpt-" << runhooks_steps[static_cast<std::size_t>(i)];
  os << "\ndecoys:";
  for (int i : c.decoy_files) os << " " << decoys[static_cast<std::size_t>(i)];
  os << "\nlinks " << c.links << ", subdirectory " << c.subdirectory << ", staging leftover "
     << c.staging_leftover << "\nuser files named like temporaries:";
  for (int i : c.user_temporary_files) os << " " << user_temporaries[static_cast<std::size_t>(i)];
  os << "\ntemporary directory " << c.temporary_dir << ", temporary links " << c.temporary_links
     << ", planted lock " << static_cast<int>(c.lock) << "\n";
  const auto spelt = [&](const Spelling& s) {
    return s.foreign ? "foreign '" + foreign_entries[static_cast<std::size_t>(s.name)] + "'"
                     : "'" + own_names[static_cast<std::size_t>(s.name)] + "' form " + std::to_string(s.form);
  };
  if (c.state) {
    os << "state: latest " << spelt(c.state->latest) << "\n  entries:";
    for (const Spelling& s : c.state->entries) os << " " << spelt(s) << ";";
    os << "\n  pending:";
    for (const Spelling& s : c.state->pending) os << " " << spelt(s) << ";";
    os << "\n  recorded:";
    for (const auto& [name, suffixes] : c.state->recorded) {
      os << " " << own_names[static_cast<std::size_t>(name)] << " {";
      for (int s : suffixes) os << " '" << suffix_pool[static_cast<std::size_t>(s)] << "'";
      os << " }";
    }
    os << "\n";
  } else {
    os << "no state file\n";
  }
  os << "max_to_keep " << c.max_to_keep << ", top_k " << c.top_k << "\n";
  for (const Op& op : c.ops) {
    if (op.kind == Op::save)
      os << "  save " << op.step << (op.score ? " scored " + std::to_string(*op.score) : std::string())
         << (op.kill_at ? " killed after " + std::to_string(*op.kill_at) + " file operations" : "")
         << "\n";
    else if (op.kind == Op::close)
      os << "  close\n";
    else
      os << "  restart with max_to_keep " << op.max_to_keep << (op.every_n_hours ? ", every 1 hour" : "") << "\n";
  }
}

// ---- Generators ----

rc::Gen<int> index_of(std::size_t n) { return rc::gen::inRange(0, static_cast<int>(n)); }

rc::Gen<Spelling> own_spelling() {
  return rc::gen::build<Spelling>(rc::gen::set(&Spelling::name, index_of(own_names.size())),
                                  rc::gen::set(&Spelling::form, rc::gen::inRange(0, 3)));
}
rc::Gen<Spelling> any_spelling() {
  return rc::gen::oneOf(own_spelling(), own_spelling(),
                        rc::gen::build<Spelling>(rc::gen::set(&Spelling::name, index_of(foreign_entries.size())),
                                                 rc::gen::set(&Spelling::foreign, rc::gen::just(true))));
}

rc::Gen<Case> cases() {
  return rc::gen::exec([] {
    Case c;
    c.tf_checkpoints = *rc::gen::container<std::vector<int>>(index_of(tf_prefixes.size()));
    c.runhooks_checkpoints = *rc::gen::container<std::vector<int>>(index_of(runhooks_steps.size()));
    c.decoy_files = *rc::gen::container<std::vector<int>>(index_of(decoys.size()));
    c.links = *rc::gen::arbitrary<bool>();
    c.subdirectory = *rc::gen::arbitrary<bool>();
    c.staging_leftover = *rc::gen::arbitrary<bool>();
    c.user_temporary_files = *rc::gen::container<std::vector<int>>(index_of(user_temporaries.size()));
    c.temporary_dir = *rc::gen::arbitrary<bool>();
    c.temporary_links = *rc::gen::arbitrary<bool>();
    c.lock = *rc::gen::weightedElement<PlantedLock>({{12, PlantedLock::none},
                                                     {1, PlantedLock::link_out},
                                                     {1, PlantedLock::dangling_link},
                                                     {1, PlantedLock::hard_link_out},
                                                     {1, PlantedLock::directory}});
    if (*rc::gen::weightedElement<bool>({{4, true}, {1, false}})) {
      StateSpec s;
      s.entries = *rc::gen::resize(8, rc::gen::container<std::vector<Spelling>>(any_spelling()));
      s.latest = *own_spelling();
      s.pending = *rc::gen::resize(4, rc::gen::container<std::vector<Spelling>>(any_spelling()));
      s.recorded = *rc::gen::resize(
          4, rc::gen::container<std::map<int, std::vector<int>>>(
                 index_of(own_names.size()),
                 rc::gen::resize(3, rc::gen::container<std::vector<int>>(index_of(suffix_pool.size())))));
      c.state = s;
    }
    c.max_to_keep = *rc::gen::inRange(0, 5);
    c.top_k = *rc::gen::weightedElement<int>({{2, -2}, {1, -1}, {1, 0}, {2, 1}, {2, 2}});
    c.ops = *rc::gen::resize(
        8, rc::gen::nonEmpty(rc::gen::container<std::vector<Op>>(rc::gen::exec([] {
          Op op;
          op.kind = *rc::gen::weightedElement<Op::Kind>({{6, Op::save}, {1, Op::close}, {2, Op::restart}});
          op.step = *rc::gen::elementOf(save_steps);
          if (*rc::gen::weightedElement<bool>({{1, true}, {2, false}}))
            op.kill_at = *rc::gen::inRange(0, 40);
          op.max_to_keep = *rc::gen::inRange(0, 5);
          op.every_n_hours = *rc::gen::weightedElement<bool>({{1, true}, {4, false}});
          if (*rc::gen::weightedElement<bool>({{2, true}, {1, false}}))
            op.score = *rc::gen::elementOf(std::vector<double>{
                0.5, 0.25, 0.25, 1.0, std::nan(""), std::numeric_limits<double>::infinity(),
                -std::numeric_limits<double>::infinity()});
          return op;
        }))));
    return c;
  });
}

// ---- The directory ----

fs::path scratch_root() {
  std::error_code error;
  if (fs::is_directory("/dev/shm", error)) return "/dev/shm";
  const char* base = std::getenv("TMPDIR");
  return base != nullptr && *base != '\0' ? base : "/tmp";
}

struct Scratch {
  fs::path parent, dir;
  Scratch() {
    std::string templ = (scratch_root() / "runhooks-deletion-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    parent = templ;
    dir = parent / "ckpt";
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(parent, ignored);
  }
};

void put_text(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

// Every entry under `root` (recursively, links not followed) with what identifies its content: a
// file's bytes, a link's target, "dir" for a directory.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  std::error_code error;
  for (fs::recursive_directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    const fs::path rel = it->path().lexically_relative(root);  // fs::relative follows links
    const fs::file_status status = fs::symlink_status(it->path());
    if (fs::is_symlink(status)) {
      out[rel.string()] = "link:" + fs::read_symlink(it->path()).string();
    } else if (fs::is_directory(status)) {
      out[rel.string()] = "dir";
    } else {
      std::ifstream in(it->path(), std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      out[rel.string()] = text.str();
    }
  }
  return out;
}

void write_step(const fs::path& prefix, std::int64_t step) {
  runhooks::detail::check_file_operation(prefix);  // a kill can come while the backend writes
  runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
  out.add("global_step", step);
  out.close();
}

std::optional<std::int64_t> step_of(const fs::path& prefix) {
  try {
    return runhooks::FlatArrayReader(prefix.string() + ".arrays").scalar<std::int64_t>("global_step");
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string spell(const Spelling& s, const fs::path& parent, const fs::path& dir) {
  if (s.foreign) {
    std::string text = foreign_entries[static_cast<std::size_t>(s.name)];
    if (!text.empty() && text[0] == '%') text = dir.string() + text.substr(1);
    if (!text.empty() && text[0] == '@') text = parent.string() + text.substr(1);
    return text;
  }
  const std::string& name = own_names[static_cast<std::size_t>(s.name)];
  if (s.form == 1) return (dir / name).string();
  if (s.form == 2) return (dir / "x" / ".." / name).string();
  return name;
}

// The kill gate: file operations left before the simulated kill; negative once killed.
std::atomic<long> operations_left{-1};
bool gate() noexcept { return operations_left.fetch_sub(1) > 0; }
struct Gate {
  Gate() {
    operations_left = 1L << 40;
    runhooks::detail::file_operation_gate() = &gate;
  }
  ~Gate() { runhooks::detail::file_operation_gate() = nullptr; }
};

// unique_token()'s 16 lowercase hex digits at `at`.
bool token_at(const std::string& file, std::size_t at) {
  if (file.size() < at + 16) return false;
  for (std::size_t i = at; i < at + 16; ++i)
    if (!((file[i] >= '0' && file[i] <= '9') || (file[i] >= 'a' && file[i] <= 'f'))) return false;
  return true;
}

bool is_staging_file(const std::string& file) {
  // .model.ckpt-<step as std::to_string writes it>.tmp-<token><anything the backend wrote>
  const std::string start = ".model.ckpt-";
  if (file.rfind(start, 0) != 0) return false;
  std::size_t at = start.size();
  const bool negative = at < file.size() && file[at] == '-';
  if (negative) ++at;
  const std::size_t digits = at;
  while (at < file.size() && file[at] >= '0' && file[at] <= '9') ++at;
  if (at == digits || (file[digits] == '0' && (at > digits + 1 || negative))) return false;
  return file.compare(at, 5, ".tmp-") == 0 && token_at(file, at + 5);
}

// checkpoint.tmp-<token> or .runhooks-probe-<token>, exactly.
bool is_temporary_file(const std::string& file) {
  for (const std::string start : {"checkpoint.tmp-", ".runhooks-probe-"})
    if (file.size() == start.size() + 16 && file.rfind(start, 0) == 0 && token_at(file, start.size()))
      return true;
  return false;
}

bool known_suffix(const std::string& s) {
  return s == ".index" || s == ".meta" || s == ".arrays" || s == ".pt" || s == ".data-00000-of-00001";
}

// ---- One case ----

void run_case(const Case& c) {
  Scratch scratch;
  const fs::path& parent = scratch.parent;
  const fs::path& dir = scratch.dir;
  fs::create_directories(dir);
  fs::create_directories(parent / "elsewhere");
  for (const std::string& name : outside_files) put_text(parent / name, "outside " + name);
  for (const std::string& suffix : tf_suffixes) put_text(parent / "elsewhere" / ("model.ckpt-5" + suffix), "tf");

  for (int i : c.tf_checkpoints)
    for (const std::string& suffix : tf_suffixes)
      put_text(dir / (tf_prefixes[static_cast<std::size_t>(i)] + suffix), "tf " + suffix);
  for (int i : c.runhooks_checkpoints)
    write_step(dir / ("model.ckpt-" + std::to_string(runhooks_steps[static_cast<std::size_t>(i)])),
               runhooks_steps[static_cast<std::size_t>(i)]);
  for (int i : c.decoy_files) put_text(dir / decoys[static_cast<std::size_t>(i)], "decoy");
  if (c.links) {
    fs::create_symlink(parent / "target.index", dir / "linked.index");
    fs::create_directory_symlink(parent / "elsewhere", dir / "out");
  }
  if (c.subdirectory) {
    fs::create_directories(dir / "sub");
    write_step(dir / "sub" / "model.ckpt-2", 2);
  }
  if (c.staging_leftover) put_text(dir / ".model.ckpt-7.tmp-fedcba9876543210.arrays", "killed");
  for (int i : c.user_temporary_files) put_text(dir / user_temporaries[static_cast<std::size_t>(i)], "user's");
  if (c.temporary_dir) {
    fs::create_directories(dir / "checkpoint.tmp-00112233445566ff");
    put_text(dir / "checkpoint.tmp-00112233445566ff" / "inside", "user's");
  }
  if (c.temporary_links)
    for (const auto& [name, target] : temporary_links) fs::create_symlink(parent / target, dir / name);
  const fs::path lock_file = dir / ".runhooks-lock";
  switch (c.lock) {
    case PlantedLock::none: break;
    case PlantedLock::link_out: fs::create_symlink(parent / "victim", lock_file); break;
    case PlantedLock::dangling_link: fs::create_symlink(parent / "created-through-the-lock", lock_file); break;
    case PlantedLock::hard_link_out: fs::create_hard_link(parent / "victim", lock_file); break;
    case PlantedLock::directory: fs::create_directory(lock_file); break;
  }

  // What the first state file says, and so which initial files are some checkpoint's own.
  std::set<std::string> named_own;                     // plain names, normalised by construction
  std::map<std::string, std::set<std::string>> recorded;  // plain name -> suffixes
  std::optional<std::string> initial_latest;
  if (c.state) {
    runhooks::CheckpointState state;
    for (const Spelling& s : c.state->entries) {
      state.all_model_checkpoint_paths.push_back(spell(s, parent, dir));
      if (!s.foreign) named_own.insert(own_names[static_cast<std::size_t>(s.name)]);
    }
    state.model_checkpoint_path = spell(c.state->latest, parent, dir);
    initial_latest = own_names[static_cast<std::size_t>(c.state->latest.name)];
    named_own.insert(*initial_latest);
    for (const Spelling& s : c.state->pending) {
      state.pending_deletions.push_back(spell(s, parent, dir));
      if (!s.foreign) named_own.insert(own_names[static_cast<std::size_t>(s.name)]);
    }
    for (const auto& [name, suffixes] : c.state->recorded) {
      Spelling s{name, false, name % 3};
      std::vector<std::string>& out = state.file_suffixes[spell(s, parent, dir)];
      recorded[own_names[static_cast<std::size_t>(name)]];  // a record, even of no suffix
      for (int i : suffixes) {
        out.push_back(suffix_pool[static_cast<std::size_t>(i)]);
        recorded[own_names[static_cast<std::size_t>(name)]].insert(suffix_pool[static_cast<std::size_t>(i)]);
      }
    }
    runhooks::write_checkpoint_state(dir, state);
  }

  // Everything under the parent but the checkpoint directory.
  const auto snapshot_outside = [&] {
    auto all = snapshot(parent);
    std::erase_if(all, [](const auto& item) { return item.first == "ckpt" || item.first.rfind("ckpt/", 0) == 0; });
    return all;
  };
  const std::map<std::string, std::string> outside_before = snapshot_outside();
  const std::map<std::string, std::string> inside_before = snapshot(dir);

  // Whether an initial file of the directory may have gone: one checkpoint's own by the rule.
  std::set<std::int64_t> saved_steps;
  const auto may_delete = [&](const std::string& file) {
    if (file == "checkpoint" || file == ".runhooks-lock") return false;
    if (file.find('/') != std::string::npos) return false;  // in a subdirectory
    if (is_staging_file(file) || is_temporary_file(file)) return true;
    for (const std::int64_t step : saved_steps)
      if (file == "model.ckpt-" + std::to_string(step) + ".arrays") return true;
    for (const std::string& name : named_own) {
      if (file.size() < name.size() || file.compare(0, name.size(), name) != 0) continue;
      const std::string suffix = file.substr(name.size());
      if (!suffix.empty() && suffix[0] >= '0' && suffix[0] <= '9') continue;
      const auto record = recorded.find(name);
      if (record == recorded.end() ? known_suffix(suffix) : record->second.count(suffix) > 0) return true;
    }
    return false;
  };

  std::optional<std::int64_t> committed;  // the newest save that returned
  std::set<std::int64_t> saved_by_us;
  const auto check = [&](const std::string& when) {
    RC_ASSERT_FALSE(snapshot_outside() != outside_before);
    const auto inside = snapshot(dir);
    for (const auto& [file, content] : inside_before) {
      // The state file is checked below; a directory is never removed.
      if (file == "checkpoint" || (content != "dir" && may_delete(file))) continue;
      const auto now = inside.find(file);
      if (now == inside.end() || now->second != content)
        RC_FAIL("after " + when + ": '" + file + "' was " + (now == inside.end() ? "deleted" : "changed") +
                ", though it is no checkpoint's own file");
    }
    if (committed) {
      const std::optional<fs::path> latest = runhooks::latest_checkpoint(dir);
      RC_ASSERT(latest.has_value());
      const std::optional<std::int64_t> step = step_of(*latest);
      if (step != committed)
        RC_FAIL("after " + when + ": the newest committed checkpoint is step " + std::to_string(*committed) +
                ", the state's latest '" + latest->string() + "' holds " +
                (step ? std::to_string(*step) : std::string("nothing readable")));
    }
    if (const auto state = runhooks::read_checkpoint_state(dir)) {
      for (const std::string& entry : state->all_model_checkpoint_paths)
        for (const std::int64_t step : saved_by_us)
          if (entry == "model.ckpt-" + std::to_string(step) && step_of(dir / entry) != step)
            RC_FAIL("after " + when + ": the state names '" + entry + "', which is not complete");
      if (c.top_k >= 0 && state->scores.size() > static_cast<std::size_t>(c.top_k))
        RC_FAIL("after " + when + ": the state scores " + std::to_string(state->scores.size()) +
                " checkpoints, more than top_k");
      for (const runhooks::CheckpointStateScore& score : state->scores)
        if (std::count(state->all_model_checkpoint_paths.begin(),
                       state->all_model_checkpoint_paths.end(), score.name) != 1)
          RC_FAIL("after " + when + ": the state scores '" + score.name + "', which it does not name");
    }
  };

  Gate gate_installed;
  if (c.lock == PlantedLock::link_out || c.lock == PlantedLock::dangling_link ||
      c.lock == PlantedLock::directory) {
    // Nothing is done in a directory whose lock file is not runhooks' to take: open() fails
    // naming it, before the probe and the sweep.
    runhooks::CheckpointManager manager({.checkpoint_dir = dir});
    try {
      manager.open(1.0e9);
      RC_FAIL("open() succeeded with a lock file planted as a link or a directory");
    } catch (const runhooks::CheckpointError& e) {
      RC_ASSERT(std::string(e.what()).find("the lock file '" + lock_file.string() + "'") != std::string::npos);
    }
    check("the refused open()");
    RC_ASSERT(snapshot(dir) == inside_before);
    return;
  }
  std::optional<runhooks::CheckpointManager> manager;
  const auto options = [&](int max_to_keep, bool every_n_hours) {
    runhooks::CheckpointManagerOptions o{.checkpoint_dir = dir, .max_to_keep = max_to_keep};
    if (every_n_hours) o.keep_checkpoint_every_n_hours = 1.0;
    return o;
  };
  const auto make_manager = [&](int max_to_keep, bool every_n_hours) {
    manager.emplace(options(max_to_keep, every_n_hours));
    if (c.top_k >= -1) manager->rank_by({.monitor = "loss", .save_top_k = c.top_k});
  };
  make_manager(c.max_to_keep, false);
  double now = 1.0e9;
  int index = 0;
  for (const Op& op : c.ops) {
    const std::string when = "op " + std::to_string(index++);
    now += 1000.0;
    if (op.kind == Op::restart) {
      manager.reset();
      make_manager(op.max_to_keep, op.every_n_hours);
      manager->open(now);
    } else if (op.kind == Op::close) {
      manager->close();
    } else {
      if (op.kill_at) operations_left = *op.kill_at;
      saved_steps.insert(op.step);
      try {
        manager->save(op.step, now, [&](const fs::path& prefix) { write_step(prefix, op.step); },
                      runhooks::DeleteDropped::now, op.score);
        if (operations_left >= 0) {
          committed = op.step;
          saved_by_us.insert(op.step);
        }
      } catch (const runhooks::CheckpointError& e) {
        if (operations_left >= 0) RC_FAIL(when + ": save failed: " + e.what());
      }
      if (operations_left < 0) {
        // Killed: the process is gone, then restarts. The save may have committed before.
        manager.reset();  // with the gate closed, its destructor writes nothing
        operations_left = 1L << 40;
        std::optional<fs::path> latest;
        try {
          latest = runhooks::latest_checkpoint(dir);
        } catch (const runhooks::CheckpointError&) {  // the first state named a missing one
        }
        if (latest && step_of(*latest) == op.step && committed != op.step) {
          committed = op.step;
          saved_by_us.insert(op.step);
        }
        check(when + " (killed)");
        make_manager(c.max_to_keep, false);
        manager->open(now);
      }
      operations_left = 1L << 40;
    }
    check(when);
  }
  manager.reset();
  check("the end");
  if (const auto state = runhooks::read_checkpoint_state(dir))
    RC_ASSERT(state->pending_deletions.empty() || !committed);
}

}  // namespace

namespace rc {
template <>
struct Arbitrary<Case> {
  static Gen<Case> arbitrary() { return cases(); }
};
}  // namespace rc

int main() {
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  const char* cases_env = std::getenv("RUNHOOKS_PROPERTY_CASES");
  const std::string n = cases_env != nullptr && *cases_env != '\0' ? cases_env : "10000";
  const char* params_env = std::getenv("RC_PARAMS");
  std::string params = params_env != nullptr ? params_env : "";
  if (params.find("max_success") == std::string::npos) {
    params += (params.empty() ? "" : " ") + std::string("max_success=") + n;
    setenv("RC_PARAMS", params.c_str(), 1);
  }
  const bool ok = rc::check("checkpoint deletion is confined to what is provably a checkpoint's own",
                            [](const Case& c) { run_case(c); });
  return ok ? 0 : 1;
}
