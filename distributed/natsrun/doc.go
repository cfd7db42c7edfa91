// Package natsrun plays a run's episodes on worker processes through NATS
// JetStream, and collects them into the usual sinks with the bytes a local
// run writes.
//
// # Shape
//
// The submitter keeps env.Run: ordering, group-wise reward allocation,
// sample numbering and the sinks stay exactly as in a local run. Only the
// env.Executor changes: an Executor that, instead of playing an episode,
// queues its env.Request for the workers and waits for the episode they
// store. Since env.Run writes in episode order and an episode is a pure
// function of its request and the run's policies, the output is the local
// run's, whatever the workers' number, speed or failures.
//
// A deployment (named by Config.Prefix, "troupe" by default) is:
//
//   - TROUPE_WORK, a work-queue stream of requests, one message per
//     episode on troupe.work.RUN.INDEX, published with message id
//     RUN.REVISION.INDEX, so a request published twice (a lost ack, a
//     re-attached submitter) is stored once. The durable pull consumer
//     "workers" hands them out: MaxAckPending bounds the episodes in hand
//     over the whole fleet (back-pressure), AckWait bounds how long a
//     silent worker keeps one.
//   - TROUPE_RESULTS, a stream of finished episodes' records, encoded by package
//     distributed/wire and split into chunks of at most Config.ChunkSize
//     (capped by the server's max_payload), on
//     troupe.result.RUN.INDEX.ATTEMPT.
//   - TROUPE_RUNS, a key-value bucket of run state: RUN.spec holds what
//     workers need to play the run (Spec, the parameters, limits and
//     seeds), and RUN.REVISION.done.INDEX marks an episode done, pointing
//     at its chunks. REVISION is the spec's revision: a run purged and
//     started again under the same id never mistakes an old marker for its
//     own.
//   - TROUPE_WORKERS, a bucket of presence keys that live workers refresh,
//     for Stats.
//
// # Exactly once
//
// A worker acknowledges a request only after its episode is stored: the
// chunks are published under a subject of their own attempt, then the done
// marker is created with KV Create, which succeeds for one attempt only. An
// attempt that loses (a redelivery raced a slow worker) purges its chunks.
// The collector reads the marker, so it sees one result per episode, and
// env.Run asks for each episode once, so the output holds each once. What
// can go wrong only repeats work:
//
//   - a worker dies (SIGKILL, a lost machine): after AckWait without a
//     heartbeat (workers send InProgress every AckWait/3), its requests go
//     to other workers;
//   - a worker stops (SIGTERM): it stops pulling, gives its episodes
//     WorkerConfig.Drain to finish, hands back the rest (Nak) and exits;
//   - a request keeps killing its workers: once it has been handed out
//     Config.MaxDeliver times, the next worker to get it records it as
//     failed (EndMaxDeliver, with the last error a worker noted) instead of
//     playing it; the server's own MaxDeliver would leave it unrecorded and
//     the submitter waiting;
//   - a request cannot be played at all (an unknown scenario or policy, bad
//     parameters): the worker records it as failed at once (EndRejected,
//     with the reason);
//   - the submitter dies: the workers go on; Start with the same id
//     re-attaches (troupe run's default id is SpecRunID, the scenario and
//     the hash of the run's spec, package runspec; RunID is a digest of a
//     RunConfig and Spec; either way the same command re-attaches), reads the done markers, does not queue
//     again what is done or still queued, and env.Run writes the whole
//     output again from the stored results;
//   - a stored result expired (Config.ResultsMaxAge) before a submitter
//     collected it: the episode is played again.
//
// A run that completes purges its requests, results and markers (unless
// Config.KeepResults), so the streams hold only unfinished runs.
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
