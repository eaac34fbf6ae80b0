#include "data/memory_data.hpp"

#include <map>
#include <mutex>

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {
namespace {

std::mutex g_lock;
std::map<std::string, std::shared_ptr<const MemoryData>>& registry() {
  static std::map<std::string, std::shared_ptr<const MemoryData>> r;
  return r;
}

}  // namespace

bool is_memory_data(const std::string& data) { return data.rfind(kMemoryDataPrefix, 0) == 0; }

void put_memory_data(const std::string& name, std::shared_ptr<const MemoryData> data) {
  std::lock_guard lock(g_lock);
  registry()[name] = std::move(data);
}

void drop_memory_data(const std::string& name) {
  std::lock_guard lock(g_lock);
  registry().erase(name);
}

std::shared_ptr<const MemoryData> memory_data(const std::string& data) {
  const std::string name = data.substr(std::string(kMemoryDataPrefix).size());
  std::lock_guard lock(g_lock);
  const auto found = registry().find(name);
  if (found == registry().end())
    throw UsageError(setting("data") + " " + data + ": no data set was handed over in memory under the name '" + name + "'");
  return found->second;
}

}  // namespace dp
