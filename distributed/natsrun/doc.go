// Package natsrun plays a run's episodes on worker processes through NATS
// JetStream, and collects them into the usual sinks with the bytes a local
// run writes.
//
// # Shape
//
// The submitter keeps play.Run: ordering, group-wise reward allocation,
// sample numbering and the sinks stay exactly as in a local run. Only the
// env.Executor changes: an Executor that, instead of playing an episode,
// queues its env.Request for the workers and waits for the episode they
// store. Since play.Run writes in episode order and an episode is a pure
// function of its request and the run's policies, the output is the local
// run's, whatever the workers' number, speed or failures.
//
// A deployment (named by Config.Prefix, "troupe" by default) is:
//
//   - TROUPE_WORK, a work-queue stream of requests on
//     troupe.work.RUN.FIRST.LAST, each message a JSON array of the
//     requests of up to Config.Batch episodes FIRST to LAST, published with
//     message id RUN.REVISION.EPOCH.FIRST.LAST, so a message published twice
//     (a lost ack) is stored once. Each run has a durable pull consumer of
//     its own, run_RUN, with the run's AckWait (how long a silent worker
//     keeps a message) and MaxAckPending (back-pressure over the fleet), so
//     that no run's settings reconfigure another's.
//   - TROUPE_RESULTS, a stream of finished episodes' records too large to
//     ride in their done markers (over 64 KiB compressed), encoded by
//     package distributed/wire, S2-compressed, and split into chunks of at
//     most Config.ChunkSize (capped by the server's max_payload), on
//     troupe.result.RUN.INDEX.ATTEMPT.
//   - TROUPE_RUNS, a key-value bucket of run state: RUN.spec holds what
//     workers need to play the run (its record: Spec, the parameters,
//     limits, seeds and the versions it was submitted under; and its
//     delivery settings), RUN.lease the submitter collecting it,
//     RUN.REVISION.done.INDEX marks an episode done (holding the episode
//     itself, or pointing at its chunks), RUN.REVISION.refused.WORKER why a
//     worker cannot play the run, RUN.cancelled a cancellation. REVISION is
//     the spec's revision: a run purged and started again under the same id
//     never mistakes an old marker for its own.
//   - TROUPE_WORKERS, a bucket of presence keys that live workers refresh,
//     for Stats and for telling when no live worker can play a run.
//
// Everything but the presence keys expires Config.ResultsMaxAge after it
// was written, so that abandoned runs leave nothing behind.
//
// # Who plays a run
//
// A worker follows the runs' specs and plays a run only if it can play it
// exactly: its scenario registered, its versions (ProtocolVersion,
// wire.Version, runspec.TroupeVersion) the worker's own, its policies ones
// the worker's policy makers (WorkerConfig.Policies) can make with the
// run's settings and LLM endpoint, and its scenario playing there as it
// does for the submitter: the run carries a fingerprint of the scenario's
// behaviour (its Info and three episodes of fixed seeds played with its
// default policy, under the run's parameters and limits), which the worker
// computes for itself once per run, before it pulls any of the run's
// requests and apart from the goroutine that follows the runs (a large
// scenario's takes seconds), and compares, so that a worker built
// with a changed scenario of the same name refuses the run by name
// (ErrFingerprint) rather than mixing its episodes into the output.
// Otherwise it never pulls the run's requests and records a
// Refusal, which the submitter logs by worker name; once every live worker
// has refused the run, the submitter stops with ErrUnplayable naming each
// one's reason.
//
// # Audit
//
// The fingerprint samples three fixed seeds with the default policy; a
// worker whose scenario differs only on other seeds, or only under the
// run's policies, passes it. Config.AuditRate makes the submitter re-play
// a share of each worker's episodes itself, drawn per episode with a
// secret key after the worker stored it, and compare them byte for byte:
// a worker lying on k episodes is caught with probability
// 1 − (1 − AuditRate)^k (AuditProbability). A differing episode is
// replaced by the submitter's own (the output stays the local run's), its
// worker's later episodes are all re-played here, and its earlier ones are
// re-played at once: one that differs was written already, and the run
// stops with ErrAudit. See audit.go.
//
// # One submitter at a time
//
// A submitter holds the run's lease and renews it every LeaseTTL/3 with an
// update conditioned on the revision it last wrote (a fencing token). A
// second submitter watches the lease for its TTL: renewed, it is refused
// with ErrRunBusy; left alone, it takes the run over, and the old holder's
// next renewal fails with ErrLeaseLost, which stops it. Only the holder
// purges a completed run.
//
// # Exactly once
//
// A worker acknowledges a request only after its episode is stored: the
// chunks are published under a subject of their own attempt, then the done
// marker is created with KV Create, which succeeds for one attempt only. An
// attempt that loses (a redelivery raced a slow worker) purges its chunks.
// The collector reads the marker, so it sees one result per episode, and
// play.Run asks for each episode once, so the output holds each once. What
// can go wrong only repeats work:
//
//   - a worker dies (SIGKILL, a lost machine): after AckWait without a
//     heartbeat (workers send InProgress every AckWait/3), its requests go
//     to other workers;
//   - a worker stops (SIGTERM): it stops pulling, gives its episodes
//     WorkerConfig.Drain to finish, hands back the rest (Nak) and exits;
//   - a request keeps killing its workers: once it has been handed out
//     the run's MaxDeliver times, the next worker to get it records it as
//     failed (EndMaxDeliver, with the last error a worker noted) instead of
//     playing it; the server's own MaxDeliver would leave it unrecorded and
//     the submitter waiting;
//   - one request cannot be played (it names another scenario, or
//     parameters of its own that are bad): the worker records it as failed
//     at once (EndRejected, with the reason);
//   - the submitter dies: the workers go on; Start with the same id
//     re-attaches (troupe run's default id is SpecRunID, the scenario and
//     the hash of the run's spec, package runspec; RunID is a digest of a
//     play.Config and Spec; either way the same command re-attaches), reads the done markers, does not queue
//     again what is done or still queued, and play.Run writes the whole
//     output again from the stored results (once the dead submitter's
//     lease lapsed);
//   - the submitter is interrupted: it removes the run's queued requests
//     and gives its lease up; a re-attach queues them again;
//   - a stored result expired (Config.ResultsMaxAge) before a submitter
//     collected it: the episode is played again.
//
// A run that completes purges its requests, results and markers (unless
// Config.KeepResults), so the streams hold only unfinished runs. Runs,
// Run, Cancel and Purge are troupe runs list, show, cancel and purge.
//
// # Counterfactual replays
//
// Episode.Replay is a function and cannot travel. The collector rebuilds
// it: the replayer re-runs the episode from its recorded actions with the
// run's scenario, parameters, policies and limits, in the collector's
// process. That is where allocation happens (per group, once all of the
// group is back), and the collector already has scenario and policies (it
// built the run). Replaying recorded actions costs the game's own compute
// only; a counterfactual that re-simulates asks the policies again, from
// the collector. Shipping replays to the workers would spread that load,
// at the cost of a second round trip per replay; it is not done.
//
// # Operations
//
// Connect passes credentials (a creds file, an nkey seed file, user and
// password, a token) and TLS files to nats.go; ConnOptions never prints a
// secret. StartEmbedded runs an in-process server with JetStream on disk,
// and StartLocal adds a worker: a single machine's resumable runs with
// nothing installed. Client.Stats reads queue depth, episodes in flight,
// redeliveries and live workers, and Stats.Metrics names them for
// Prometheus. docs/distributed.md shows a 3-node cluster and its workers;
// docs/scaling.md what a cluster carries.
package natsrun
