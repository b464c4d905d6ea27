#pragma once
// Memory over time: one chart per device in use, the predicted running memory of a rank (and the
// loaded trace's, dashed, on the same chart), the device's capacity and the step cursor.
#include <QChartView>
#include <QComboBox>
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

// (seconds, bytes) points of a rank's memory on a device, stepping at each op's end in time order;
// starts at (0, before) when `before` is given.
std::vector<QPointF> memory_steps(const Trace& trace, int rank, Device device,
                                  std::optional<Bytes> before);

class MemoryPage : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryPage(Session& session, QWidget* parent = nullptr);
  void set_scale(ScaleMode scale);
  // The chart of each device in use (GPU, then CPU and NVMe when they hold anything).
  std::vector<QChartView*> charts();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void request_rebuild();
  void rebuild();
  void move_cursor();
  QChart* device_chart(Device device);
  Session& session_;
  QComboBox* scale_;
  std::array<QChartView*, kDeviceCount> views_{};  // one per device, hidden when unused
  std::vector<QLineSeries*> cursors_;
  bool dirty_ = true;
};

}  // namespace zerolens::gui
