package runspec_test

import "github.com/troupe-rl/troupe/agents"

type agents_Policy = agents.Policy

func randomPolicy() agents.Policy { return agents.Random() }
