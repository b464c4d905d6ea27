#pragma once
// The stages of a pipeline on CPU ranks (zerolens's CPU backend, a cluster calibrated with device
// "cpu"): each stage's ranks run its ops in program order on one thread each, and the ranks of a
// node share its cores. Unlike one rank's step, where every rank of the node is at work at once,
// a pipeline leaves ranks waiting in receives (the bubbles): while they wait, the ranks at work
// have the cores to fewer, so an op's own work stretches by the share of the ranks at work at each
// moment (cpu_share_of), not of all the node's ranks.
#include <span>
#include <vector>

#include "sim/hardware/hardware.hpp"
#include "sim/model/model.hpp"
#include "sim/schedule/schedule.hpp"
#include "sim/timeline/timeline.hpp"

namespace zerolens {

// Every stage's op timings, parallel to `stages` and their ops; `models` are the stages' models.
// A receive ends when the peer stage's matching send (same phase, micro-step and sending chunk)
// has ended. Throws std::logic_error when a stage waits for a send no stage makes.
std::vector<std::vector<OpTiming>> simulate_cpu_pipeline(std::span<const Schedule* const> stages,
                                                         std::span<const Model* const> models,
                                                         const Cluster& cluster);

}  // namespace zerolens
