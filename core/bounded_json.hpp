// JSON from a file dp reads (a model file, a safetensors or tensor file's header, a checkpoint's
// state.json), nested at most kMaxJsonDepth levels. nlohmann's parser keeps its own stack, but
// copying, printing and freeing a value recurse once a level: a file nested 50,000 deep parses,
// then overflows the stack. No file dp reads nests beyond a handful of levels, so a deeper one is
// refused while it is parsed (JsonTooDeep), before anything recurses through it.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/shorten.hpp"

namespace dp {

constexpr int kMaxJsonDepth = 128;

struct JsonTooDeep : std::runtime_error {
  JsonTooDeep() : std::runtime_error("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels") {}
};

// nlohmann::json::parse(args...) with the depth bound.
template <class... Input>
nlohmann::json parse_bounded_json(Input&&... input) {
  return nlohmann::json::parse(std::forward<Input>(input)...,
                               [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
                                 if (depth > kMaxJsonDepth) throw JsonTooDeep();
                                 return true;
                               });
}

// A value from such a file, as JSON text cut to one short line, for an error message that names it
// (a file may hold a 100 KB string where a number belongs).
inline std::string short_dump(const nlohmann::json& value, size_t max = 60) { return shorten(value.dump(), max); }

}  // namespace dp
