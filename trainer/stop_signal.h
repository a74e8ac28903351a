// A stop the launcher asks for (SIGTERM: a re-form when a node joins or
// leaves, a restart after another rank failed, the job stopped) costs no
// training: while armed, SIGTERM only records the request, the training
// loop finishes the optimizer step in progress, takes its snapshot into
// the agent's memory and then ends the process as SIGTERM would. The ranks
// agree on that step: each votes with its gradients (ddp.h, stop_vote) and
// every rank stops after the first step any rank voted in, so none starts
// a step the others will not finish.
//
// A rank that cannot finish its step (a peer is stopped or gone and the
// collective waits for it) must not hold up the restart: a request ends
// the process anyway once `bound` has passed (SIGALRM, whole seconds), as
// SIGTERM's default action would. Unarmed (setting up, evaluating the
// last epoch, or without snapshot memory that outlives the process),
// SIGTERM ends the process at once, as before.
//
// Process-wide; the signal side is async-signal-safe (lock-free atomics,
// alarm, kill).
#ifndef ELASTRUN_TRAINER_STOP_SIGNAL_H_
#define ELASTRUN_TRAINER_STOP_SIGNAL_H_

#include "absl/time/time.h"

namespace elastrun::trainer {

class StopSignal {
 public:
  // Installs the SIGTERM and SIGALRM handlers (unarmed). Call once, from
  // the main thread, before training.
  static void Install();
  // While armed, SIGTERM is a request (Requested) honoured within the
  // bound; unarmed, it ends the process at once (a request already made
  // does so when disarming).
  static void Arm();
  static void Disarm();
  // How long a request may take to be honoured: three steps, at least
  // 10 s (an evaluation may come first).
  static void SetStepTime(absl::Duration step);
  static bool Requested();
  // Ends the process as SIGTERM's default action does (the launcher sees
  // "killed by signal 15").
  [[noreturn]] static void Exit();
};

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_STOP_SIGNAL_H_
