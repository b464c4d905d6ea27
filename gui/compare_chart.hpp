#pragma once
// DP, ZeRO-1/2/3 and the offload variants for the current model and cluster
// (sim/plan/variants.hpp): GPU memory per rank at the peak stacked by category with the GPU's
// capacity, host memory and NVMe per node, and the traffic per rank; and the job's GPUs split
// other ways (tensor x pipeline x data parallel, sim/predict/layouts.hpp): each layout's GPU peak
// and step time. Variants and layouts the planner refuses are listed with its reason. Planned when
// the page is shown, again after each change.
#include <QChartView>
#include <QLabel>
#include <QWidget>
#include <vector>

#include "gui/session.hpp"
#include "sim/plan/variants.hpp"
#include "sim/predict/layouts.hpp"

namespace zerolens::gui {

class ComparePage : public QWidget {
  Q_OBJECT

 public:
  explicit ComparePage(Session& session, QWidget* parent = nullptr);
  // Plans the variants when the plan changed since the last time.
  void ensure_computed();
  const std::vector<VariantPlan>& variants() const { return variants_.plans; }
  const VariantComparison& comparison() const { return variants_; }
  const LayoutComparison& layouts() const { return layouts_; }
  QChartView& memory() { return *memory_; }
  QChartView& host() { return *host_; }
  QChartView& traffic() { return *traffic_; }
  QChartView& layout_memory() { return *layout_memory_; }
  QChartView& layout_time() { return *layout_time_; }
  const QLabel& left_out() const { return *left_out_; }

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void rebuild_charts();
  Session& session_;
  bool stale_ = true;
  VariantComparison variants_;
  LayoutComparison layouts_;
  QLabel* status_;
  QLabel* left_out_;  // one line per variant or layout the planner refused, with its reason
  QChartView* memory_;
  QChartView* host_;
  QChartView* traffic_;
  QChartView* layout_memory_;
  QChartView* layout_time_;
};

// True when the variant is the one the plan uses (same stage and offload devices).
// A variant's label short enough for a half-width chart: "ZeRO-3 + opt:nvme + param:nvme" ->
// "Z3 o:nvme p:nvme".
QString short_variant_label(const std::string& label);
bool is_current_variant(const Variant& variant, const Plan& plan);
// A layout's label short enough for a third of the page: "tp 2 sp x pp 2 v 2 x dp 2 (ZeRO-1)" ->
// "tp2 sp pp2 v2 dp2 (Z1)".
QString short_layout_label(const LayoutPlan& layout);

}  // namespace zerolens::gui
