package env

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-rl/troupe/agents"
)

// Errors a scenario module's author meets point at the fix: the closest
// known names for a typo.
func TestDidYouMean(t *testing.T) {
	known := []string{"blotto", "elfarol", "tictactoe", "werewolf"}
	for name, want := range map[string]string{
		"elfarl":    `; did you mean "elfarol"?`,
		"ElFarol":   `; did you mean "elfarol"?`,
		"tictac":    `; did you mean "tictactoe"?`,
		"chess":     "",
		"b":         "",
		"werewolf2": `; did you mean "werewolf"?`,
	} {
		if got := didYouMean(name, known); got != want {
			t.Errorf("didYouMean(%q) = %q, want %q", name, got, want)
		}
	}
	if got := didYouMean("ab", []string{"aa", "bb"}); got != `; did you mean "aa" or "bb"?` {
		t.Errorf("two names as close: %q", got)
	}
}

func TestErrorsSayWhatToDo(t *testing.T) {
	info := Info{
		Name:   "coins",
		Roles:  []*agents.Role{{Name: "player"}},
		Params: []ParamSpec{{Name: "rounds", Kind: IntParam, Default: "3", Min: 1, Max: 9}, {Name: "mode", Kind: StringParam, Default: "fast", Choices: []string{"fast", "slow"}}},
	}
	_, err := info.ParseParams(map[string]string{"round": "4"})
	if !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), `did you mean "rounds"?`) {
		t.Errorf("a misspelt parameter: %v", err)
	}
	_, err = info.ParseParams(map[string]string{"mode": "slwo"})
	if !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), `did you mean "slow"?`) {
		t.Errorf("a misspelt choice: %v", err)
	}
	_, err = ParseAssignments([]string{"rounds"})
	if !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), "seats=5") {
		t.Errorf("a parameter without a value: %v", err)
	}
	_, err = info.MakePolicy(PolicyRequest{Name: "randm", Role: "player"})
	if !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), `did you mean "random"?`) {
		t.Errorf("a misspelt policy: %v", err)
	}
}
