#include "engine/split/splitter.hpp"

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

Splitter::Splitter(SplitPolicy policy, int devices) : policy_(std::move(policy)), devices_(devices) {
  if (policy_.mode == SplitPolicy::Mode::Auto) balancer_ = std::make_unique<AutoBalancer>(devices);
}

std::vector<int64_t> Splitter::chunk_sizes(int64_t batch) const {
  if (balancer_) return balancer_->sizes(batch);
  if (!memory_weights_.empty()) return largest_remainder(memory_weights_, batch);
  return split_sizes(policy_, batch, devices_);
}

bool Splitter::needs_memory_probe() const {
  return policy_.mode == SplitPolicy::Mode::BalanceMemory && memory_weights_.empty();
}

void Splitter::set_memory_plan(const MemoryPlan& plan) { memory_weights_.assign(plan.chunks.begin(), plan.chunks.end()); }

bool Splitter::wants_measurement(int64_t step) const { return balancer_ && balancer_->wants_measurement(step); }

bool Splitter::settled() const { return !balancer_ || balancer_->settled(); }

std::string Splitter::observe(const std::vector<int64_t>& chunks, const std::vector<double>& replica_seconds) {
  return balancer_ ? balancer_->observe(chunks, replica_seconds) : "";
}

nlohmann::json Splitter::state() const {
  nlohmann::json j = split_json(policy_);  // mode, chunks, ratios, gpu0
  j["policy"] = split_text(policy_);
  if (balancer_) {
    const auto st = balancer_->state();
    j["auto"] = {{"weights", st.weights},
                 {"seconds_per_sample", st.seconds_per_sample},
                 {"observations", st.observations},
                 {"steady", st.steady}};
  }
  if (!memory_weights_.empty()) j["balance_memory_chunks"] = memory_weights_;
  return j;
}

void Splitter::restore(const nlohmann::json& j) {
  try {
    if (!same_policy(j))
      throw RuntimeError("the checkpoint was made with " + setting("split") + " " +
                         j.at("policy").get<std::string>() + ", not " + split_text(policy_));
    if (balancer_ && j.contains("auto"))
      balancer_->restore({j["auto"].at("weights").get<std::vector<double>>(),
                          j["auto"].at("seconds_per_sample").get<std::vector<double>>(),
                          j["auto"].at("observations").get<std::vector<int>>(),
                          j["auto"].value("steady", 0)});  // absent in checkpoints made before captured steps
    if (j.contains("balance_memory_chunks")) {
      memory_weights_ = j["balance_memory_chunks"].get<std::vector<double>>();
      if (static_cast<int>(memory_weights_.size()) != devices_)
        throw RuntimeError("the checkpoint's balance-memory chunks are for another number of devices");
    }
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(std::string("the checkpoint's split state is malformed (") + e.what() + ")");
  }
}

bool Splitter::same_policy(const nlohmann::json& j) const {
  if (!j.is_object()) return false;
  if (j.contains("mode")) return split_from_json(j) == policy_;
  return j.contains("policy") && j["policy"].is_string() && j["policy"].get<std::string>() == split_text(policy_);
}

}  // namespace dp
