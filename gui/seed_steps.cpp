#include "gui/seed_steps.hpp"

#include <functional>

namespace zerolens::gui {
namespace {

using OpTest = std::function<bool(const Op&)>;

// The first op at or after `from` that passes, or -1.
std::int64_t first_from(const std::vector<Op>& ops, std::int64_t from, const OpTest& test) {
  if (from < 0) return -1;
  for (auto i = std::size_t(from); i < ops.size(); ++i)
    if (test(ops[i])) return std::int64_t(i);
  return -1;
}

// The last op before `before` that passes, or -1.
std::int64_t last_before(const std::vector<Op>& ops, std::int64_t before, const OpTest& test) {
  for (auto i = std::min<std::int64_t>(before, std::int64_t(ops.size())); i-- > 0;)
    if (test(ops[std::size_t(i)])) return i;
  return -1;
}

OpTest kind_in(OpKind kind, Phase phase) {
  return [=](const Op& op) { return op.kind == kind && op.phase == phase; };
}

// The ops the seed's pictures are moments of; -1 where the schedule has none.
struct Moments {
  std::int64_t first_gather, first_forward, first_release, next_gather, last_gather, loss;
  std::int64_t backward_start, reduced_gather, reduced_backward, first_reduce, next_backward_gather,
      second_reduce, last_reduce, update_start, update, last;
  std::int32_t reduced_owner = -1;  // the layer whose parameters reduced_backward uses
};

Moments find_moments(const std::vector<Op>& ops, const std::vector<Layer>& layers) {
  Moments m{};
  m.first_gather = first_from(ops, 0, kind_in(OpKind::AllGather, Phase::Forward));
  const std::int32_t layer = m.first_gather < 0 ? -1 : ops[std::size_t(m.first_gather)].layer;
  const auto of_layer = [&](OpKind kind) {
    return [=](const Op& op) { return op.kind == kind && op.layer == layer; };
  };
  m.first_forward = first_from(ops, m.first_gather, of_layer(OpKind::Forward));
  m.first_release = first_from(ops, m.first_forward, of_layer(OpKind::Release));
  m.next_gather = first_from(ops, m.first_release, kind_in(OpKind::AllGather, Phase::Forward));
  m.last_gather =
      last_before(ops, std::int64_t(ops.size()), kind_in(OpKind::AllGather, Phase::Forward));
  m.loss = last_before(ops, std::int64_t(ops.size()), kind_in(OpKind::Forward, Phase::Forward));
  m.backward_start = first_from(ops, 0, [](const Op& op) { return op.phase == Phase::Backward; });
  m.first_reduce =
      first_from(ops, m.backward_start, kind_in(OpKind::ReduceScatter, Phase::Backward));
  m.reduced_backward = last_before(ops, m.first_reduce, kind_in(OpKind::Backward, Phase::Backward));
  // The gather of the parameters that backward uses (a tied LM head's are the embedding's); with
  // prefetching the last gather before it may be another layer's, and the last layers' parameters
  // may be kept from the forward (no gather of theirs in backward): then the last gather before it.
  std::int32_t used = m.reduced_backward < 0 ? -1 : ops[std::size_t(m.reduced_backward)].layer;
  if (used >= 0 && std::size_t(used) < layers.size() &&
      layers[std::size_t(used)].shares_params_of >= 0)
    used = layers[std::size_t(used)].shares_params_of;
  m.reduced_owner = used;
  m.reduced_gather = last_before(ops, m.reduced_backward, [=](const Op& op) {
    return op.kind == OpKind::AllGather && op.phase == Phase::Backward && op.layer == used;
  });
  if (m.reduced_gather < 0)
    m.reduced_gather =
        last_before(ops, m.reduced_backward, kind_in(OpKind::AllGather, Phase::Backward));
  // The next layer's backward after the first reduction: its gather, or its backward when the
  // gathers were all prefetched before it; the reduction itself when it reduced every gradient
  // (one bucket).
  m.next_backward_gather =
      first_from(ops, m.first_reduce, kind_in(OpKind::AllGather, Phase::Backward));
  if (m.next_backward_gather < 0)
    m.next_backward_gather =
        first_from(ops, m.first_reduce, kind_in(OpKind::Backward, Phase::Backward));
  if (m.next_backward_gather < 0) m.next_backward_gather = m.first_reduce;
  m.last_reduce =
      last_before(ops, std::int64_t(ops.size()), kind_in(OpKind::ReduceScatter, Phase::Backward));
  m.second_reduce = first_from(ops, std::max(m.first_reduce + 1, m.next_backward_gather),
                               kind_in(OpKind::ReduceScatter, Phase::Backward));
  if (m.second_reduce < 0) m.second_reduce = m.last_reduce;
  m.update_start = first_from(ops, 0, [](const Op& op) { return op.phase == Phase::Optimizer; });
  m.update = first_from(ops, m.update_start, kind_in(OpKind::OptimizerStep, Phase::Optimizer));
  m.last = std::int64_t(ops.size()) - 1;
  return m;
}

bool complete(const Moments& m) {
  for (std::int64_t op :
       {m.first_gather, m.first_forward, m.first_release, m.next_gather, m.last_gather, m.loss,
        m.backward_start, m.reduced_gather, m.reduced_backward, m.first_reduce,
        m.next_backward_gather, m.second_reduce, m.last_reduce, m.update_start, m.update, m.last})
    if (op < 0) return false;
  return true;
}

// A few words per step for the step bar's menu, in the seed's order.
const char* const kTitles[kSeedStepCount] = {"the GPUs and the model",
                                             "split the data",
                                             "the model's partitions",
                                             "memory of the model states",
                                             "16-bit parameters",
                                             "16-bit gradients",
                                             "fp32 copy and optimizer states",
                                             "every state partitioned",
                                             "ready for forward",
                                             "forward starts",
                                             "gather GPU 0's parameters",
                                             "forward with them",
                                             "delete the gathered copy",
                                             "the next layers",
                                             "the last layer",
                                             "the loss",
                                             "backward starts",
                                             "gather for backward",
                                             "gradients on every GPU",
                                             "reduce to the owners",
                                             "the next layers",
                                             "the next bucket",
                                             "every gradient reduced",
                                             "update starts",
                                             "update the fp32 partition",
                                             "fp32 to 16-bit parameters",
                                             "iteration completed"};

std::vector<SeedStep> titled(std::vector<SeedStep> steps) {
  for (SeedStep& step : steps) step.title = kTitles[step.number - 1];
  return steps;
}

// The steps, or none when their ops do not come in the seed's order (a schedule whose prefetches
// or buckets interleave otherwise: each step would not follow the one before).
std::vector<SeedStep> in_order(std::vector<SeedStep> steps) {
  for (std::size_t i = 1; i < steps.size(); ++i)
    if (steps[i].op < steps[i - 1].op) return {};
  return steps;
}

}  // namespace

std::vector<SeedStep> seed_steps(const Plan& plan) {
  const auto& ops = plan.schedule.ops;
  const Moments m = find_moments(ops, plan.rank_model.layers);
  const bool one_bucket = m.first_reduce == m.last_reduce;
  if (!complete(m)) return {};
  const int n = plan.schedule.context.dp_size;
  const std::string quarter = "1/" + std::to_string(n);
  const std::string gpus = std::to_string(n) + " GPUs";
  const auto layer = [&](std::int64_t op) {
    const std::int32_t l = ops[std::size_t(op)].layer;
    return l >= 0 && std::size_t(l) < plan.rank_model.layers.size()
               ? plan.rank_model.layers[std::size_t(l)].name
               : std::string("?");
  };
  const auto is_lm_head = [&](std::int64_t op) {
    const std::int32_t l = ops[std::size_t(op)].layer;
    return l >= 0 && std::size_t(l) < plan.rank_model.layers.size() &&
           plan.rank_model.layers[std::size_t(l)].kind == LayerKind::LmHead;
  };
  const std::string before = "Before the first op (the schedule has no op for this picture): ";
  return in_order(titled({
      {1, "", before + "the " + gpus + ", each training the model on its own data.", -1},
      {2, "Split the whole data into 4 equal parts for each GPU to process.",
       before + "each rank trains on its own micro-batch (micro-batch " +
           std::to_string(plan.schedule.context.micro_batch) + " x " +
           std::to_string(plan.schedule.context.seq_len) + " tokens), 1/" + std::to_string(n) +
           " of the step's batch.",
       -1},
      {3, "",
       before + "the model split into " + std::to_string(n) +
           " partitions, one per GPU: each bar's blocks are its rank's " + quarter +
           ", in its colour.",
       -1},
      {4, "GPU Memory Used by Model Parameters, Gradients and Optimizers",
       before +
           "the bars: parameters, gradients, fp32 parameters and optimizer states, each the "
           "rank's " +
           quarter + ".",
       -1},
      {5, "", before + "the 16-bit parameters, 2 bytes a parameter, " + quarter + " on each GPU.",
       -1},
      {6, "", before + "the 16-bit gradients, 2 bytes a parameter, " + quarter + " on each GPU.",
       -1},
      {7,
       "To effectively compute and apply the updates at the end of the backward propagation, the "
       "mixed-precision optimizer keeps an fp32 copy of the parameters as well as an fp32 copy of "
       "all the other optimizer states.",
       before +
           "the 'fp32 parameters' (4 bytes a parameter) and 'optimizer states' (Adam's "
           "momentum and variance, 8 bytes) blocks, " +
           quarter + " on each GPU.",
       -1},
      {8, "",
       before + "every model state partitioned: each GPU holds " + quarter +
           " of the 16 bytes a parameter of mixed-precision Adam.",
       -1},
      {9, "", before + "the data and the partitions in place, ready for the forward pass.", -1},
      {10, "Forward Pass starts from this step",
       before + "the next op (\u2192) starts the forward pass.", -1},
      {11, "Broadcasts model parameters of GPU 0 to other GPUs.",
       "ZeRO-3 (DeepSpeed) splits every layer over all the GPUs rather than giving each GPU whole "
       "layers, so the first layer's (" +
           layer(m.first_gather) + ") parameters are all-gathered: each GPU sends its " + quarter +
           " to every other.",
       m.first_gather},
      {12, "",
       "Each GPU runs " + layer(m.first_forward) +
           "'s forward on its own data with the gathered parameters.",
       m.first_forward},
      {13,
       "Once Forward Pass is completed, delete model parameters of GPU 0 stored in GPU 1, 2, "
       "and 3.",
       "The gathered copy of " + layer(m.first_release) +
           " is released right after its forward; each GPU keeps its " + quarter + ".",
       m.first_release},
      {14, "Replicate the process performed in steps 11, 12, and 13 on the remaining GPUs as well.",
       "The next layer (" + layer(m.next_gather) +
           ") is gathered, run and released the same way, then every layer after it.",
       m.next_gather},
      {15, "", "The last gather of the forward pass (" + layer(m.last_gather) + "'s parameters).",
       m.last_gather},
      {16, "Once forward pass is completed, calculate loss on each GPU for its respective dataset.",
       "The last forward (" + layer(m.loss) + ")" +
           (is_lm_head(m.loss) ? ": the LM head's forward computes the loss on the GPU's own data."
                               : "."),
       m.loss},
      {17, "Backward Propagation from this step",
       "Backward runs the layers in reverse, gathering each layer's parameters again.",
       m.backward_start},
      {18, "",
       ops[std::size_t(m.reduced_gather)].layer == m.reduced_owner
           ? "The parameters of " + layer(m.reduced_gather) + " gathered again for its backward."
           : layer(m.reduced_gather) +
                 "'s parameters gathered ahead of their backward (a "
                 "prefetch; " +
                 layer(m.reduced_backward) + "'s own, backward next, were kept from the forward).",
       m.reduced_gather},
      {19, "",
       "Each GPU computes " + layer(m.reduced_backward) +
           "'s full gradients on its own data (the 'new grads', every owner's share).",
       m.reduced_backward},
      {20, "",
       "The gradients reduced to their owners: a reduce-scatter sums them over the " + gpus +
           ", each keeps the " + quarter + " it owns and the full copies are freed.",
       m.first_reduce},
      {21, "Replicate the process performed in steps 18, 19, and 20 on the remaining GPUs as well.",
       one_bucket ? std::string("None is left: the one reduce bucket (reduce_bucket_size) held "
                                "every layer's gradients.")
                  : "The next layer (" + layer(m.next_backward_gather) +
                        ") is gathered, run backward and its gradients reduce-scattered the same "
                        "way.",
       m.next_backward_gather},
      {22, "",
       one_bucket ? std::string("The one gradient bucket, reduce-scattered.")
                  : std::string("The next gradient bucket reduce-scattered to its owners."),
       m.second_reduce},
      {23, "",
       "The last gradients reduce-scattered: each GPU holds only its " + quarter +
           " of the summed gradients.",
       m.last_reduce},
      {24, "Parameter Update start from this step",
       m.update_start == m.update
           ? std::string("The update phase starts with the optimizer step.")
           : std::string("The update phase starts with what needs every GPU's partition before "
                         "the optimizer step (one number all-reduced each: the 16-bit overflow "
                         "flag, the gradient norm)."),
       m.update_start},
      {25, "",
       "Each GPU updates its " + quarter +
           " of the fp32 parameters with its Adam states and its gradients.",
       m.update},
      {26, "",
       "The updated fp32 partition is copied into the 16-bit parameters: part of the same "
       "optimizer step in zerolens.",
       m.update},
      {27, "Training Iteration is completed",
       "The step's last op; the next step starts from the updated partitions.", m.last},
  }));
}

std::string seed_step_caption(const SeedStep& step) {
  std::string text = "Seed step " + std::to_string(step.number) + " of " +
                     std::to_string(kSeedStepCount) + " (" + step.title + "): ";
  text += step.seed_caption.empty() ? "(the seed's picture has no caption)" : step.seed_caption;
  return text + "\nIn zerolens: " + step.zerolens;
}

}  // namespace zerolens::gui
