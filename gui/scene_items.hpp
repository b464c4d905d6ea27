#pragma once
// Keys of QGraphicsItem::data on the scenes' items, so views and tests find blocks and ops by
// what they stand for rather than by where they are drawn.
namespace zerolens::gui {

namespace item_key {
enum : int { Role = 0, Rank, Device, Component, Owner, Bytes, Op, Ops, Seconds };
}
// Op: one op, or several merged when too narrow to draw apart (Ops: how many; Op: the first).
// Exposed: an interval of the exposed lane (Seconds: its length).
// GroupFrame: the dashed frame around the columns a collective runs over (a TP group, an hpZ
// group).
// RowLabel: a timeline row's name, on the label column that stays in view as the chart scrolls.
enum class ItemRole : int {
  Block = 1,
  Freed,
  Capacity,
  Transfer,
  Column,
  Op,
  RankLabel,
  Exposed,
  GroupFrame,
  RowLabel
};

}  // namespace zerolens::gui
