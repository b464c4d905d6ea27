#pragma once
// Memory over time: one chart per device in use, the predicted running memory of a rank stacked by
// category (and the loaded trace's, dashed, on the same chart), the device's capacity, the peak
// allocated, reserved and device-used levels, and the step cursor; a click moves the cursor.
#include <QChartView>
#include <QComboBox>
#include <QLabel>
#include <QLineSeries>
#include <QPointF>
#include <QVBoxLayout>
#include <QWidget>
#include <array>
#include <optional>
#include <vector>

#include "gui/rank_scene.hpp"
#include "gui/session.hpp"

namespace zerolens::gui {

// (seconds, bytes) points of a rank's memory on a device: the state after each op in program order
// at memory_times' time (once it and the ops before it have ended); starts at (0, before) when
// `before` is given.
std::vector<QPointF> memory_steps(const Trace& trace, int rank, Device device,
                                  std::optional<Bytes> before);

// A rank's memory on a device by category, stacked over the step: per category in use, the
// (seconds, bytes) steps of the categories up to it (the last one's top is the predicted line),
// from the replay's states after each op at memory_times' time.
// `show` keeps the components the rank view's Show mode keeps (the walkthrough's model states and
// their copies: its CUDA context and workspaces, 805 MB of 806, would leave the states a line).
std::vector<std::pair<Category, std::vector<QPointF>>> category_stack(
    const Planned& planned, Device device, ShowMemory show = ShowMemory::All);
// What a device holds at the plan's peak, the largest first: up to `count` components with bytes
// (same scope as the plan's peak: GPU per rank, CPU and NVMe per node).
std::vector<std::pair<Component, Bytes>> top_allocations(const Plan& plan, Device device,
                                                         std::size_t count);
// The op that ends last at or before `seconds` (-1: none, before the step).
std::int64_t op_at_time(const Timeline& timeline, double seconds);

class MemoryPage : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryPage(Session& session, QWidget* parent = nullptr);
  void set_scale(ScaleMode scale);
  // What the stack holds, as the rank view's Show: all memory (with the predicted line, the peak
  // levels and a loaded trace's line) or only the model states (and their copies).
  void set_show(ShowMemory show);
  ShowMemory show() const;
  // The chart of each device in use (GPU, then CPU and NVMe when they hold anything).
  std::vector<QChartView*> charts();
  const QLabel& peak_allocations() const { return *peak_; }

 protected:
  void showEvent(QShowEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void request_rebuild();
  void rebuild();
  void move_cursor();
  QChart* device_chart(Device device);
  void show_peak_allocations(const Planned& planned);
  Session& session_;
  QComboBox* scale_;
  QComboBox* show_;
  QLabel* peak_;                                   // the largest allocations at the GPU's peak
  std::array<QChartView*, kDeviceCount> views_{};  // one per device, hidden when unused
  std::vector<QLineSeries*> cursors_;
  bool dirty_ = true;
};

}  // namespace zerolens::gui
