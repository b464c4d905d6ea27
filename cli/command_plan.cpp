// `zerolens plan`: memory per device and traffic per link for one configuration, or the planning
// views (--compare, --max-model, --deepspeed-estimate).
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/plan_options.hpp"
#include "cli/reports.hpp"
#include "sim/predict/prediction.hpp"
#include "sim/report/plan_json.hpp"

namespace zerolens::cli {
namespace {

struct PlanCommand {
  PlanOptions options;
  bool json = false, csv = false, compare = false, deepspeed_estimate = false, verbose = false;
  bool require_fit = false;
  std::optional<std::string> max_model;
  std::string units = "GB";
  std::string output;
};

nlohmann::json max_model_json(const MaxModelSearch& search) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : search.variants) {
    nlohmann::json row = {{"variant", r.variant.label},
                          {"found", r.found},
                          {"model", r.model_name},
                          {"parameter_count", r.parameter_count}};
    if (r.binding) {
      row["binding"] = {{"model", r.binding->model_name},
                        {"device", to_string(r.binding->device)},
                        {"peak_bytes", r.binding->peak},
                        {"capacity_bytes", r.binding->capacity},
                        {"allocator_out_of_memory", r.binding->allocator_out_of_memory}};
    }
    rows.push_back(row);
  }
  nlohmann::json left_out = nlohmann::json::array();
  for (const auto& [variant, reason] : search.left_out)
    left_out.push_back({{"variant", variant.label}, {"reason", reason}});
  return {{"schema", "zerolens.max_model"},
          {"version", kPlanJsonVersion},
          {"variants", rows},
          {"left_out", left_out}};
}

int run_plan(const PlanCommand& command) {
  if (command.json && command.csv) throw InputError("--json/--csv", "choose one output format");
  const SizeUnit unit = parse_size_unit(command.units);
  Diagnostics diagnostics;
  const PlanRequest request = make_plan_request(command.options, diagnostics);
  print_warnings(diagnostics);
  Output output(command.output);
  std::ostream& out = output.stream();
  if (command.compare) {
    const VariantComparison comparison = compare_variants(request);
    if (command.json) {
      out << compare_to_json(comparison).dump(2) << '\n';
    } else if (command.csv) {
      print_compare_csv(out, comparison);
      print_left_out(std::cerr, comparison.left_out);  // the CSV keeps one row shape
    } else {
      print_compare(out, comparison, unit);
    }
    return kExitOk;
  }
  if (command.max_model) {
    const MaxModelSearch search = find_max_models(request, *command.max_model);
    if (command.json) {
      out << max_model_json(search).dump(2) << '\n';
    } else if (command.csv) {
      print_max_models_csv(out, search.variants);
      print_left_out(std::cerr, search.left_out);  // the CSV keeps one row shape
    } else {
      print_max_models(out, search, request);
    }
    return kExitOk;
  }
  if (command.deepspeed_estimate) {
    if (request.model.trainable_parameter_count() < request.model.parameter_count())
      throw InputError("--deepspeed-estimate",
                       "DeepSpeed's estimators count every parameter as trained; they do not "
                       "apply to a frozen base (--lora-rank)");
    print_deepspeed_estimates(out, request, unit);
    return kExitOk;
  }
  const Plan plan = predict(request, {.simulate = Simulate::Never}).plan;
  if (command.json) out << plan_to_json(plan).dump(2) << '\n';
  else if (command.csv) print_plan_csv(out, plan);
  else print_plan(out, plan, unit, command.verbose);
  return command.require_fit && !plan.fits() ? kExitCheckFailed : kExitOk;
}

}  // namespace

void register_plan_command(CLI::App& app, CommandRegistry& registry) {
  auto command = std::make_shared<PlanCommand>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Predict memory per rank and device (GPU, CPU, NVMe) by category and traffic per link");
  add_plan_options(*plan, command->options);
  auto* views = "Views and output";
  plan->add_flag("--compare", command->compare, "DP vs ZeRO-1/2/3 vs each offload variant, side by side")->group(views);
  plan->add_option("--max-model", command->max_model,
                   "Largest model that fits per variant: dense (search over dense:N), gpt2, llama2, llama3, presets")
      ->expected(0, 1)->default_str("dense")->group(views);
  plan->add_flag("--deepspeed-estimate", command->deepspeed_estimate,
                 "DeepSpeed's estimate_zero2/zero3 tables next to zerolens's figures")->group(views);
  plan->add_flag("--json", command->json, "Versioned JSON (schema zerolens.plan, docs/plan-json.md)")->group(views);
  plan->add_flag("--csv", command->csv, "CSV")->group(views);
  plan->add_option("--units", command->units, "Units of sizes in tables: GB (1e9 bytes) or GiB (2^30 bytes)")
      ->check(CLI::IsMember({"GB", "GiB", "gb", "gib"}))->capture_default_str()->group(views);
  plan->add_flag("-v,--verbose", command->verbose, "Also show where every byte goes (components)")->group(views);
  plan->add_flag("--require-fit", command->require_fit, "Exit with status 1 when the plan does not fit")->group(views);
  plan->add_option("-o,--output", command->output, "Write to a file instead of standard output")->group(views);
  auto views_conflict = [command] {
    const int chosen = int(command->compare) + int(command->max_model.has_value()) + int(command->deepspeed_estimate);
    if (chosen > 1) throw InputError("--compare/--max-model/--deepspeed-estimate", "choose one view");
  };
  registry.add(plan, [command, views_conflict] {
    views_conflict();
    return run_plan(*command);
  });
}

}  // namespace zerolens::cli
