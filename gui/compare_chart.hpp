#pragma once
// DP, ZeRO-1/2/3 and the offload variants for the current model and cluster
// (sim/plan/variants.hpp): GPU memory per rank at the peak stacked by category with the GPU's
// capacity, host memory and NVMe per node, and the traffic per rank. Planned when the page is
// shown, again after each change.
#include <QChartView>
#include <QLabel>
#include <QWidget>
#include <vector>

#include "gui/session.hpp"
#include "sim/plan/variants.hpp"

namespace zerolens::gui {

class ComparePage : public QWidget {
  Q_OBJECT

 public:
  explicit ComparePage(Session& session, QWidget* parent = nullptr);
  // Plans the variants when the plan changed since the last time.
  void ensure_computed();
  const std::vector<VariantPlan>& variants() const { return variants_; }
  QChartView& memory() { return *memory_; }
  QChartView& host() { return *host_; }
  QChartView& traffic() { return *traffic_; }

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void rebuild_charts();
  Session& session_;
  bool stale_ = true;
  std::vector<VariantPlan> variants_;
  QLabel* status_;
  QChartView* memory_;
  QChartView* host_;
  QChartView* traffic_;
};

// True when the variant is the one the plan uses (same stage and offload devices).
// A variant's label short enough for a half-width chart: "ZeRO-3 + opt:nvme + param:nvme" ->
// "Z3 o:nvme p:nvme".
QString short_variant_label(const std::string& label);
bool is_current_variant(const Variant& variant, const Plan& plan);

}  // namespace zerolens::gui
