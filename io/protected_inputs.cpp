#include "io/protected_inputs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace fs = std::filesystem;

namespace dp {

namespace {

using FileKey = std::pair<dev_t, ino_t>;

// The file's identity: (device, inode) when it exists, else its resolved absolute path.
struct Identity {
  bool exists = false;
  FileKey key{};
  std::string path;
  bool operator==(const Identity& o) const { return exists && o.exists ? key == o.key : path == o.path; }
};

Identity identity_of(const std::string& path) {
  Identity id;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) id.exists = true, id.key = {st.st_dev, st.st_ino};
  std::error_code ec;
  id.path = fs::weakly_canonical(fs::absolute(path), ec).string();
  if (ec) id.path = fs::absolute(path).lexically_normal().string();
  return id;
}

fs::path canonical_or_normal(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : c;
}

// The path as named, its folders resolved but its last component kept: a link that lies inside a
// folder is inside it, wherever it points.
fs::path named_place(const std::string& path) {
  const fs::path abs = fs::absolute(path);
  return canonical_or_normal(abs.parent_path()) / abs.filename();
}

// `p` relative to `root` when it lies inside it.
std::optional<fs::path> inside(const fs::path& p, const fs::path& root) {
  const fs::path rel = p.lexically_relative(root);
  if (rel.empty() || *rel.begin() == ".." || rel == ".") return std::nullopt;
  return rel;
}

// Every file a reader of `dir` reaches, links followed as a reader follows them (a folder reached
// twice, through a cycle of links, is walked once): the first whose identity is one of `wanted`,
// as its path below the folder's root.
struct FolderWalk {
  const std::set<FileKey>& wanted;
  std::set<FileKey> folders_seen;
  std::optional<std::pair<FileKey, fs::path>> found;

  void walk(int dir_fd, const fs::path& rel) {
    struct stat self {};
    if (::fstat(dir_fd, &self) != 0 || !folders_seen.insert({self.st_dev, self.st_ino}).second) {
      ::close(dir_fd);
      return;
    }
    DIR* d = ::fdopendir(dir_fd);
    if (!d) {
      ::close(dir_fd);
      return;
    }
    while (!found) {
      const dirent* e = ::readdir(d);
      if (!e) break;
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st {};
      if (::fstatat(::dirfd(d), e->d_name, &st, 0) != 0) continue;  // a dangling link reads nothing
      const FileKey key{st.st_dev, st.st_ino};
      if (S_ISDIR(st.st_mode)) {
        const int sub = ::openat(::dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sub >= 0) walk(sub, rel / name);
      } else if (wanted.count(key)) {
        found = {key, rel / name};
      }
    }
    ::closedir(d);
  }
};

[[noreturn]] void refuse(const NamedPath& out, const fs::path& rel, const NamedPath& folder) {
  throw UsageError(out.what + " " + out.path + " is " + rel.string() + " in " + folder.what + " " + folder.path +
                   ": writing it would destroy an input");
}

}  // namespace

void check_distinct_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  std::vector<std::pair<const NamedPath*, Identity>> outs;
  for (const auto& o : outputs)
    if (!o.path.empty()) outs.push_back({&o, identity_of(o.path)});
  for (size_t i = 0; i < outs.size(); ++i)
    for (size_t j = i + 1; j < outs.size(); ++j)
      if (outs[i].second == outs[j].second)
        throw UsageError(outs[i].first->what + " and " + outs[j].first->what + " name the same file (" +
                         outs[i].first->path + "); give each output its own");
  for (const auto& in : inputs) {
    if (in.path.empty()) continue;
    const Identity id = identity_of(in.path);
    for (const auto& [o, oid] : outs)
      if (oid == id)
        throw UsageError(o->what + " " + o->path + " is the same file as " + in.what + ": writing it would destroy an input");
  }
}

void check_outside_folders(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& folders) {
  // Each output's two places (as named, and where its links lead) and, when it exists, its identity.
  struct Output {
    const NamedPath* named;
    fs::path place, target;
    std::optional<FileKey> key;
  };
  std::vector<Output> outs;
  std::set<FileKey> existing;
  for (const auto& o : outputs) {
    if (o.path.empty()) continue;
    Output out{&o, named_place(o.path), canonical_or_normal(resolve_output(o.path, o.what)), std::nullopt};
    struct stat st {};
    if (::stat(out.target.c_str(), &st) == 0) {
      out.key = FileKey{st.st_dev, st.st_ino};
      existing.insert(*out.key);
    }
    outs.push_back(std::move(out));
  }
  if (existing.empty()) return;  // only new files: nothing can be destroyed
  for (const auto& folder : folders) {
    std::error_code ec;
    if (folder.path.empty() || !fs::is_directory(folder.path, ec)) continue;
    const fs::path root = canonical_or_normal(folder.path);
    for (const auto& o : outs) {
      if (!o.key) continue;
      if (auto rel = inside(o.place, root)) refuse(*o.named, *rel, folder);
      if (auto rel = inside(o.target, root)) refuse(*o.named, *rel, folder);
    }
    // Files reached through links or hard links: the walk finds them by identity.
    const int fd = ::open(folder.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    FolderWalk walk{existing, {}, std::nullopt};
    walk.walk(fd, {});
    if (walk.found)
      for (const auto& o : outs)
        if (o.key == walk.found->first) refuse(*o.named, walk.found->second, folder);
  }
}

}  // namespace dp
