// Package protocol is the vocabulary every other troupe package speaks: the
// messages agents exchange on the environment's bus, and the training Sample
// that each agent turn becomes.
//
// protocol imports nothing of troupe. Its Sample is, field for field, the
// Sample dataclass of THUDM/slime (slime/utils/types.py): a Sample encoded with
// AppendJSON loads with slime's Sample.from_dict unchanged. troupe's own data
// (scenario, seed, episode, agent, role, turn, team reward, allocator) lives in
// Sample.Metadata, never in new top-level keys.
package protocol
