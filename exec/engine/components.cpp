#include "exec/engine/components.hpp"

#include <span>
#include <vector>

namespace zerolens::exec {

// The resident buffers come in the plan's order: NVMe stores and swap buffers, the master, the
// parameters, the optimizer's states, the gradient partition, the reduce buffer. With NVMe offload
// the master is assembled in memory once, then written to the sub-groups' files.
EngineComponents::EngineComponents(const Plan& plan, Communicator& comm, LayerModel& net,
                                   MemoryLedger& ledger)
    : EngineComponents(plan,
                       std::make_shared<const ProcessGroups>(
                           comm, ParallelShape{.tensor = 1, .data = comm.size(), .pipeline = 1},
                           plan.schedule.context.shard_group, plan.schedule.context.hpz_group,
                           plan.schedule.context.expert_parallel),
                       net, ledger) {}

EngineComponents::EngineComponents(const Plan& plan, std::shared_ptr<const ProcessGroups> groups,
                                   LayerModel& net, MemoryLedger& ledger)
    : context(plan, std::move(groups), ledger),
      nvme(context, Optimizer(plan.request.config.optimizer).state_per_element()),
      params(context, nvme),
      grads(context),
      optimizer(context, grads, params, nvme),
      checkpoint(context, params, optimizer, nvme) {
  optimizer.allocate_master();
  const bool master_in_files = context.has_master && nvme.optimizer_in_files();
  std::vector<float> initial_master(master_in_files ? std::size_t(context.layout.owned) : 0);
  const Numbers master =
      master_in_files ? Numbers(std::span<float>(initial_master)) : optimizer.master();
  params.initialize(net, master);
  if (master_in_files) nvme.init_optimizer(initial_master);
  optimizer.allocate_states();
  grads.allocate_resident();
}

}  // namespace zerolens::exec
