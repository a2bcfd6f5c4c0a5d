// train/retention.h: what stays on disk in a run's checkpoint folder: the newest N
// checkpoints plus every M-th step as a milestone (and always the one `latest` names),
// and the removal of the temporary step_*.tmp-PID folders (and run-link temporaries) a
// killed run left behind.
// defines: RetentionPolicy, prune_checkpoints, remove_stale_temp_dirs, checkpoint_step_of
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace octet::train {

struct RetentionPolicy {
  int64_t keep_last = 3;   // the newest N complete checkpoints (by step); 0: keep every one
  int64_t keep_every = 0;  // also keep each step divisible by M (milestones); 0: none
};

// The step of a complete checkpoint folder name "step_NNNNNNNN"; nullopt for anything
// else (temporary folders, `latest`, other files).
std::optional<int64_t> checkpoint_step_of(const std::string& name);

// Deletes the complete checkpoints of `dir` the policy does not keep. The one `latest`
// names is always kept, and so are the folder names in `also_keep` (the checkpoint a guard
// rollback would return to); without a readable `latest` nothing is deleted. Call it only
// after a new checkpoint and `latest` are complete. Returns the folders deleted.
std::vector<std::string> prune_checkpoints(const std::string& dir, const RetentionPolicy& policy,
                                           const std::vector<std::string>& also_keep = {});

// Deletes the step_*.tmp-PID folders of `dir`, and the .<file>.tmp-PID links of
// train/run_links.h (a kill between creating and renaming one leaves it), whose writer is gone: PID
// is not a live process (kill(PID, 0) fails with ESRCH) or is this process (which has not started a
// checkpoint yet when this is called). Folders of live processes are never touched.
// Returns the folders deleted.
std::vector<std::string> remove_stale_temp_dirs(const std::string& dir);

}  // namespace octet::train
