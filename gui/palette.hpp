#pragma once
// Colours of the views: one per rank (the owner of a partition), one per memory category, one per
// kind of op. Kept in one place so the rank view, the timeline and the charts agree.
#include <QColor>
#include <string>

#include "sim/schedule/schedule.hpp"

namespace zerolens::gui {

inline constexpr int kRankColours = 16;

// The colour of the `column`-th rank drawn (distinct for up to kRankColours columns).
QColor rank_colour(int column);
// Bytes owned by ranks that are not drawn (more than 16 ranks).
QColor other_ranks_colour();
QColor category_colour(Category category);
// A rank's colour shaded for a model-state category, so parameters, gradients, fp32 copies and
// optimizer states of one owner read as one family.
QColor owned_colour(QColor owner, Category category);
// Timeline and legend colours by op kind name as traces spell it ("all_gather", ...).
QColor op_colour(const std::string& kind);
// The same for an op on a stream (as traces spell it): the tensor-parallel group's collectives
// ("tp") take tensor_parallel_colour, shaded by kind, so they read apart from ZeRO's collectives.
QColor op_colour(const std::string& kind, const std::string& stream);
// The tensor-parallel group: its stream, its collectives and its ranks in the rank view.
QColor tensor_parallel_colour();
// Short names for labels inside blocks and legends.
const char* category_label(Category category);

}  // namespace zerolens::gui
