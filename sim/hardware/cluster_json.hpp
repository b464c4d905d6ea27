#pragma once
// Clusters from and to JSON files (units such as "80 GiB" and "600 GB/s" understood).
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/core/error.hpp"
#include "sim/hardware/hardware.hpp"

namespace zerolens {

Cluster cluster_from_json(const nlohmann::json& json, Diagnostics& diagnostics);
nlohmann::json cluster_to_json(const Cluster& cluster);
// A preset name or a path to a cluster JSON file.
Cluster load_cluster(const std::string& spec, Diagnostics& diagnostics);
// Parts of the calibration block as the cluster JSON writes them (calibrate's report shares them).
nlohmann::json group_collectives_json(const std::vector<GroupCollectives>& groups);
nlohmann::json nvme_requests_json(const std::vector<NvmeRequestCosts>& requests);

}  // namespace zerolens
