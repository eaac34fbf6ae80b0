// A module: PyTorch's nn.Module for this engine. A model is a tree of modules whose dotted paths
// are PyTorch's state-dict names ("layer1.0.downsample.1.running_var"): containers (Sequential,
// a residual BasicBlock) route tensors between their children, in any DAG; leaves (Conv2d,
// BatchNorm2d, Linear, ...) own parameters and buffers, bound as views into the replica's flat
// parameter, gradient and buffer storage, so replication and reduction stay bucketed copies of
// one flat array each (models/model.hpp lays them out).
//
// forward caches what backward needs; backward writes (not accumulates) the module's parameter
// gradients, drops the cache, and returns the input gradient unless need_grad_in is false. So
// activation memory rises through forward and falls through backward.
//
// Activation checkpointing (--recompute blocks; torch.utils.checkpoint around each block): a
// module that is a recompute unit (a ResNet BasicBlock, a GPT Block) and has recompute set keeps
// only its input after a training forward, dropping every activation its subtree cached; its
// backward first runs that forward again ("repeating"), then the usual backward. A repeat does
// exactly what the first forward did, without its side effects (BatchNorm: no second update of
// the running statistics, and under --sync-bn the statistics met the first time, no second
// all-reduce); dropout's masks are drawn from the pass, not from a stream, so they repeat. So
// training with it is bit for bit training without it, for one more forward of each unit.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.hpp"
#include "kernels/activation_math.hpp"
#include "kernels/dropout_mask.hpp"

namespace dp {

class Device;
class CrossReplicaSum;

constexpr int64_t kEveryRecomputeUnit = std::numeric_limits<int64_t>::max();  // Module::set_recompute: every unit

// Where a training pass's dropout masks come from (kernels/dropout_mask.hpp): the step's key —
// read from device memory when the kernels run, so a replayed step draws its own — and where the
// samples this module tree takes sit in the step's whole batch. The Network owns one and sets it
// before each training forward; without one, dropout draws under key 0.
struct DropoutSource {
  uint64_t key = 0;
  const uint32_t* key_at = nullptr;
  int64_t first_sample = 0;  // this process's index of the pass's first sample
  SamplePlacement placement{};
};
// The masks of dropout site `site` at probability p for the pass `source` (null: key 0) says.
DropoutMask dropout_mask(const DropoutSource* source, float p, uint32_t site);

struct ParamDecl {
  enum class Kind { Parameter, Buffer };
  // Tril: ones on and below the diagonal of the last two dimensions, zeros above (a causal mask).
  enum class Init { Uniform, Normal, Ones, Zeros, Values, Tril };
  std::string name;  // state-dict suffix: "weight", "running_mean", ...
  Shape shape;
  Kind kind = Kind::Parameter;
  Init init = Init::Zeros;
  double scale = 0;  // Uniform(-scale, scale) or Normal(0, scale)
  bool integer = false;  // num_batches_tracked: int64 in the state dict
  std::vector<float> values{};  // Init::Values: the whole tensor (a buffer the module computes)
};

class Module {
 public:
  struct Child {
    std::string name;
    std::unique_ptr<Module> module;
  };

  virtual ~Module() = default;
  virtual std::string describe() const = 0;  // "Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)"
  // Output shape for an input shape (without the batch dim); RuntimeError if incompatible.
  virtual Shape output_shape(const Shape& in) const = 0;
  // Whether it takes a value without the batch dimension (a model file's positions: embedding).
  virtual bool reads_unbatched() const { return false; }
  // This module's own parameters, then its own buffers, in PyTorch's state-dict order.
  virtual std::vector<ParamDecl> params() const { return {}; }
  const std::vector<Child>& children() const { return children_; }
  bool has_params() const;  // here or in any descendant
  // State-dict names that are another entry's parameter under a second name (tied weights:
  // nanoGPT's lm_head.weight is transformer.wte.weight), each with the entry it names. Only a
  // root declares them (a model file's graph); the layout lists them beside its entries.
  struct TiedName {
    std::string name, target;
  };
  virtual std::vector<TiedName> tied_names() const { return {}; }

  // One tensor per params() entry; grads holds an undefined tensor for buffers (and for all
  // entries when only inference runs).
  void bind(std::vector<Tensor> values, std::vector<Tensor> grads);
  // The module's forward_impl; for a recompute unit in training, the input kept and the subtree's
  // cache dropped (see the top of this file).
  Tensor forward(Device& dev, const Tensor& in, bool training);
  // The module's backward_impl, then its after-backward hook, if one is set: from that moment its
  // own parameter gradients are final (containers call their children's backward, so every
  // module's hook fires, in backward's order).
  Tensor backward(Device& dev, const Tensor& grad_out, bool need_grad_in);
  // What a step shape hangs on a module: before and after its forward (a recomputed one too, inside
  // its recompute unit's backward) and its backward. DDP's all-reduce sends a bucket of gradients
  // once every module in it has run after_backward; ZeRO gathers a module's sharded parameters
  // before it runs and binds its gradients into buckets. Empty functions: none.
  struct Hooks {
    std::function<void()> before_forward, after_forward, before_backward, after_backward;
  };
  void set_hooks(Hooks hooks) { hooks_ = std::move(hooks); }
  const Hooks& hooks() const { return hooks_; }
  // Drop whatever forward cached (a step that failed part-way); containers recurse, and call this
  // base (it drops a recompute unit's kept input).
  virtual void clear_cache();
  // Whether this module is a block worth recomputing: one whose activations are many times its
  // input (BasicBlock, the GPT's Block).
  virtual bool recompute_unit() const { return false; }
  // Recompute the first `first` recompute units of this subtree in forward order (depth first) and
  // not the others (0: none; kEveryRecomputeUnit: all); returns how many units the subtree has.
  int64_t set_recompute(int64_t first);
  // --sync-bn: BatchNorm layers normalise with statistics over every member of `group`, this
  // module tree being member `replica`; null: over this replica's chunk alone. Containers recurse.
  virtual void set_replica_group(CrossReplicaSum* group, int replica);
  // The source dropout modules draw their masks from (it outlives the tree). Containers recurse.
  virtual void set_dropout_source(const DropoutSource* source);

 protected:
  virtual Tensor forward_impl(Device& dev, const Tensor& in, bool training) = 0;
  virtual Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) = 0;
  // True while a recompute unit above repeats its forward: side effects are not to happen again.
  bool repeating() const { return repeating_; }
  Module& add(std::string name, std::unique_ptr<Module> child);
  std::vector<Tensor> values_, grads_;

 private:
  void set_repeating(bool on);  // on this subtree
  void mark_recompute(int64_t first, int64_t& seen);  // set_recompute's walk; `seen`: units before

  std::vector<Child> children_;
  Hooks hooks_;
  bool recompute_ = false, repeating_ = false;
  Tensor recompute_input_;  // a recompute unit's input, from its forward to its backward
};

// Containers.
class Sequential : public Module {
 public:
  std::string describe() const override { return "Sequential"; }
  Shape output_shape(const Shape& in) const override;
  // Children run in the order appended; unnamed ones are named by position ("0", "1", ...).
  Sequential& append(std::unique_ptr<Module> child);
  Sequential& append(std::string name, std::unique_ptr<Module> child);
  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override;
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override;

 private:
  // Index of the first child with parameters (children before it need no backward when no
  // input gradient is asked for); -1 until the first backward, reset by append.
  int64_t first_trainable_ = -1;
};
std::unique_ptr<Sequential> make_sequential();

// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the shortcut
// being x or downsample(x) = BatchNorm(Conv1x1 stride s) when the shape changes. batchnorm=false
// leaves both norms out (a residual model whose replicas agree exactly, for tests).
std::unique_ptr<Module> make_basic_block(int64_t in, int64_t planes, int64_t stride, bool batchnorm = true);

// Leaves.
enum class WeightInit {
  PyTorchDefault,      // kaiming_uniform(a=√5): U(±1/√fan_in), bias the same
  KaimingNormalFanOut  // torchvision ResNet's convolutions: N(0, √(2/fan_out)), fan_out = out·kh·kw
};
// init_std 0: PyTorch's default init; > 0: N(0, init_std) weights and zero bias (nanoGPT's).
std::unique_ptr<Module> make_linear(int64_t in, int64_t out, bool bias = true, double init_std = 0);
// A Linear whose output rows are stored `stored` (≥ out) wide, the columns past `out` zero padding
// that its backward never reads: a language model's logits aligned for the GEMMs and the loss
// (gpt_logits_width). Its parameters are make_linear's.
std::unique_ptr<Module> make_linear_with_padded_rows(int64_t in, int64_t out, int64_t stored, bool bias,
                                                     double init_std);
// A Linear with a bias whose entries [begin, begin + count) read as zero and get no gradient (Swin
// V2's qkv: torchvision zeroes the key bias for every forward, so it never acts and never learns).
std::unique_ptr<Module> make_linear_with_silent_bias(int64_t in, int64_t out, int64_t begin, int64_t count);
// groups: in and out in that many independent parts (depthwise: groups = in); dilation: taps apart.
std::unique_ptr<Module> make_conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                    bool bias = true, WeightInit init = WeightInit::PyTorchDefault, int64_t groups = 1,
                                    int64_t dilation = 1);
// A kernel and padding of their own height and width (kernel {1, 7}, padding {0, 3}: Inception's).
std::unique_ptr<Module> make_conv2d(int64_t in, int64_t out, std::array<int64_t, 2> kernel, int64_t stride,
                                    std::array<int64_t, 2> padding, bool bias = true,
                                    WeightInit init = WeightInit::PyTorchDefault, int64_t groups = 1,
                                    int64_t dilation = 1);
// affine false: no weight and bias (scale 1, shift 0); track_running_stats false: no buffers, the
// batch's statistics in evaluation too.
std::unique_ptr<Module> make_batchnorm2d(int64_t channels, float momentum = 0.1f, float eps = 1e-5f,
                                         bool affine = true, bool track_running_stats = true);
std::unique_ptr<Module> make_relu();
// nn.ReLU6, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.Hardswish, nn.Hardsigmoid (models/activation.cpp).
std::unique_ptr<Module> make_activation(Activation a);
// PyTorch's MaxPool2d (padding never wins: it is −inf; ceil_mode's partial last window).
std::unique_ptr<Module> make_maxpool2d(int64_t kernel, int64_t stride, int64_t padding = 0, bool ceil_mode = false);
std::unique_ptr<Module> make_adaptive_avgpool2d_1x1();  // AdaptiveAvgPool2d((1, 1))
// nn.AvgPool2d and nn.AdaptiveAvgPool2d((h, w)) (models/avgpool2d.cpp).
std::unique_ptr<Module> make_avgpool2d(int64_t kernel, int64_t stride, int64_t padding = 0, bool ceil_mode = false,
                                       bool count_include_pad = true);
std::unique_ptr<Module> make_adaptive_avgpool2d(int64_t out_h, int64_t out_w);
std::unique_ptr<Module> make_flatten();
// nn.Dropout(p) in training, the identity otherwise; `site` numbers it among the model's dropouts
// (its masks are its own: kernels/dropout_mask.hpp).
std::unique_ptr<Module> make_dropout(float p, uint32_t site);
// torchvision's stochastic depth, mode "row": in training each sample kept whole with probability
// 1 − p (scaled by 1/(1 − p)) or zeroed, one draw a sample from dropout's stream at `site`.
std::unique_ptr<Module> make_stochastic_depth(float p, uint32_t site);
// Transformer leaves (models/transformer_layers.cpp).
// Over the last dimension; bias false: no shift (nanoGPT's bias=False).
std::unique_ptr<Module> make_layernorm(int64_t channels, float eps = 1e-5f, bool bias = true);
std::unique_ptr<Module> make_gelu();                                          // exact (erf)
std::unique_ptr<Module> make_embedding(int64_t vocab, int64_t dim, double init_std = 0.02);  // int32 ids in
// nanoGPT's CausalSelfAttention over [T, C] samples: children c_attn, c_proj and resid_dropout
// (models/attention.cpp); c_proj's weights drawn with proj_std (nanoGPT: 0.02/√(2·layers)). With
// dropout p > 0, the attention probabilities drop at site `site` (attn_dropout, inside the
// attention kernel) and c_proj's output at site + 1 (resid_dropout). fused: the flash kernels
// where they apply (kernels/ops/attention_fused.hpp: 16-bit, no dropout, heads of 32 or 64).
std::unique_ptr<Module> make_causal_self_attention(int64_t channels, int64_t heads, double proj_std = 0.02,
                                                   float dropout = 0, uint32_t site = 0, bool fused = false);
// PyTorch's nn.MultiheadAttention as self-attention over [L, E] samples (batch first), no causal
// mask (models/multihead_attention.cpp): own in_proj_weight and in_proj_bias, child out_proj;
// dropout p > 0 on the probabilities at site `site`.
std::unique_ptr<Module> make_multihead_attention(int64_t embed_dim, int64_t heads, bool bias = true, float dropout = 0,
                                                 uint32_t site = 0);
// torchvision's window attention with a relative position bias (models/window_attention.cpp).
// Swin's ShiftedWindowAttention (v1) over [H, W, C] samples, channels last: the image padded to
// whole windows, rolled by −shift, cut into windows that attend within themselves (the shifted
// windows masked where they wrap), and put back. Own relative_position_bias_table and
// relative_position_index (a buffer, as torchvision keeps it), children qkv and proj.
std::unique_ptr<Module> make_shifted_window_attention(int64_t dim, std::array<int64_t, 2> window,
                                                      std::array<int64_t, 2> shift, int64_t heads,
                                                      bool qkv_bias = true, bool proj_bias = true);
// Swin V2's ShiftedWindowAttentionV2, the same windows: cosine attention with a learned logit_scale
// per head, the bias table 16·sigmoid(cpb_mlp(relative_coords_table)) (cpb_mlp: Linear(2,
// cpb_hidden), ReLU, Linear(cpb_hidden, heads, bias=False)), the key part of qkv's bias silent.
// Own logit_scale, relative_coords_table and relative_position_index; children qkv, proj, cpb_mlp.
std::unique_ptr<Module> make_shifted_window_attention_v2(int64_t dim, std::array<int64_t, 2> window,
                                                         std::array<int64_t, 2> shift, int64_t heads,
                                                         bool qkv_bias = true, bool proj_bias = true,
                                                         int64_t cpb_hidden = 512);
// MaxViT's RelativePositionalMultiHeadAttention over [G, P, C] samples: each of G partitions of
// P = size² tokens attends within itself, heads of head_dim, scores scaled by C^−½ (torchvision's
// feat_dim ** -0.5). Own relative_position_bias_table and relative_position_index [P, P], children
// to_qkv and merge.
std::unique_ptr<Module> make_relative_position_attention(int64_t dim, int64_t head_dim, int64_t tokens);

// nanoGPT's GPT (models/gpt.cpp): transformer.{wte, wpe, drop, h.i.{ln_1, attn, ln_2, mlp}, ln_f} and
// an lm_head without bias, not tied to wte. Samples are [T] int32 token ids; the output is [T, V],
// its rows stored gpt_logits_width(V) wide.
// dropout: nanoGPT's config.dropout, at its four places (after the embeddings, on the attention
// probabilities, after attention's and the MLP's projections); 0: none.
struct GptConfig {
  int64_t vocab = 256, context = 128, layers = 4, heads = 4, dim = 256;
  float dropout = 0;
  // Attention through the fused (flash) kernels where they apply: the same weights and the same
  // function, each block keeping O(T) instead of its [heads, T, T] probabilities for backward.
  bool fused_attention = false;
};
std::unique_ptr<Module> make_gpt(const GptConfig& cfg);
// The logits' row width for a vocabulary of V: V rounded up to a multiple of 64 where that adds at
// most V/64 columns (GPT-2's 50257: 50304), else V. Aligned rows let the lm_head's GEMMs and the
// loss use tensor-core tiles and vector loads (an odd V leaves every row misaligned in 16 bits);
// the padding is never a class: the loss, evaluation and sampling read V columns of each row, and
// every output and file keeps V (the lm_head's weight is [V, C]).
int64_t gpt_logits_width(int64_t vocab);

}  // namespace dp
