// train/trainer_stop.cpp: the stop a Ctrl-C asks for, agreed under data parallelism: every
// rank learns at the same step boundary whether any rank was asked to stop (an all-reduce
// of one flag), so all of them write the same checkpoint and end together.
#include "core/buffer.h"
#include "dist/comm.h"
#include "dist/data_parallel.h"
#include "train/trainer.h"

namespace octet::train {

bool Trainer::agreed_stop() {
  if (!dp_) return stop_requested();
  const Tensor flag = stats_.tensor(stop_flag_);
  float mine = stop_requested() ? 1.0f : 0.0f;
  copy_bytes(flag.data, flag.device, &mine, Device::cpu(), 4);
  comm_->all_reduce(flag, dist::ReduceOp::max);
  copy_bytes(&mine, Device::cpu(), flag.data, flag.device, 4);
  if (mine > 0.0f && !stop_requested()) request_stop();  // the run stops here on every rank
  return mine > 0.0f;
}

}  // namespace octet::train
