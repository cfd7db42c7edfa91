// Package runspec describes a run as data: a serialisable Spec of
// everything that decides the episodes a run plays and the samples it
// writes, and one resolver, Spec.Resolve, that turns it into Go values (an
// play.Config, the allocators and reward format of a
// trajectories.Output). troupe run (from its flags, or --spec FILE), the
// rollout service (each request), the experiment runner and NATS workers
// all build their runs through it, so
// "which policy does a role play when none is named" and "what does a run
// consist of" are answered in one place.
//
// # Fields
//
// A spec is a JSON object with snake_case keys:
//
//	format            "troupe.runspec/v1" (Format)
//	troupe_version    the troupe that wrote it (TroupeVersion)
//	scenario          the scenario's registered name
//	params            {"name": "value"}: the scenario's parameters
//	policies          {"role": {"name": "llm", "settings": {...}}}: roles left
//	                  out play the scenario's default policy, else random;
//	                  settings are the policy maker's (an LLM's model and
//	                  sampling); the scenario's policies and random take none
//	emit              ["role", ...]: whose turns become samples; [] all
//	limits            {"max_steps", "max_turns", "max_messages", "timeout": "30s"}
//	on_invalid        {"mode": "pass"|"end", "penalty", "bonus"}
//	allocators        ["team", "rae:alpha=0.9", ...]: the first is the scalar reward
//	reward_format     "scalar" or "dict"
//	episodes          how many, at least 1
//	group_size        episodes per group, at least 1
//	seed              the run seed
//	rollout_id_base   episode 0's rollout_id
//	group_index_base  group 0's group_index
//	seeds             {"scenario", "policy"}: optional, the seeds of a run of
//	                  one group that its caller chose (a rollout request's);
//	                  left out, every seed derives from seed
//	tree              {"k", "alpha", "joint", "roles"}: optional, tree sampling
//	merge_turns       true: the merged layout, one sample per agent per
//	                  episode; left out: a sample per turn
//	merge_reward      "mean" or "last": a merged sample's reward of its turns';
//	                  left out: their sum (what specs before it meant; troupe
//	                  run and serve write mean, their default)
//
// A role's "llm" settings are the LLM policy maker's (cli): besides the
// model and sampling, every setting that changes a prompt or the samples'
// ids is there (no_memory, max_context, format, kind, token_in, tokenize,
// invalid_retries, feedback), written only when it is not the default a
// spec without it means, so that specs written before them keep their
// hash and a run changed in any of them has another.
//
// What a spec leaves out does not change the output: concurrency, where
// the samples go and in which layout, fail-fast, which machines play the
// episodes, the LLM server's address and key.
//
// # Canonical form and hash
//
// Canonical encodes the spec with its defaults explicit (Normalized),
// object keys sorted and no insignificant whitespace; Hash is the hex
// SHA-256 of that. Resolve goes further: Resolved.Spec names every
// parameter (defaults included), every role's policy and each allocator by
// its canonical name, so two specs that mean the same run have resolved
// specs with the same hash. The hash covers every field, troupe_version
// included: a run's identity for resumable runs and distributed workers.
// It changes only when the spec does or when Format or the encoding of a
// field changes, which bumps Format.
//
// Decode reads a spec strictly: unknown fields are refused by name, and
// Validate's errors (*FieldError) name the bad field by its JSON path.
package runspec
