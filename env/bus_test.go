package env_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// TestChannelRules checks each rule of Bus's doc on a fresh bus of seats
// a, b, c: the script runs, then the bus delivers, and the test compares
// each message's recipients and every mailbox.
func TestChannelRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		// script acts on the bus; send posts one message and returns its
		// error.
		script  func(b *env.MemBus, send func(from string, to protocol.Address) error)
		wantErr string   // the first send's error, "" for none
		want    [][]int  // each message's recipients
		mail    []string // each seat's mailbox, the messages' senders joined
	}{
		{
			name: "a non-member may send; members but the sender receive",
			script: func(b *env.MemBus, send func(string, protocol.Address) error) {
				b.Join(0, "team")
				b.Join(1, "team")
				_ = send("c", protocol.Channel("team"))
				_ = send("a", protocol.Channel("team"))
			},
			want: [][]int{{0, 1}, {1}},
			mail: []string{"c", "c a", ""},
		},
		{
			name: "the environment may send",
			script: func(b *env.MemBus, send func(string, protocol.Address) error) {
				b.Join(2, "team")
				_ = send(protocol.EnvSender, protocol.Channel("team"))
			},
			want: [][]int{{2}},
			mail: []string{"", "", "env"},
		},
		{
			name: "a channel that never had a member is an error naming channel and sender",
			script: func(b *env.MemBus, send func(string, protocol.Address) error) {
				require.Error(t, send("b", protocol.Channel("tema")))
			},
			wantErr: `agent "b" sends to channel "tema", which has never had a member`,
			want:    [][]int{},
			mail:    []string{"", "", ""},
		},
		{
			name: "the environment's error names it",
			script: func(b *env.MemBus, send func(string, protocol.Address) error) {
				require.Error(t, send(protocol.EnvSender, protocol.Channel("tema")))
			},
			wantErr: `the environment sends to channel "tema"`,
			want:    [][]int{},
			mail:    []string{"", "", ""},
		},
		{
			name: "a channel everyone left takes messages that reach no one",
			script: func(b *env.MemBus, send func(string, protocol.Address) error) {
				b.Join(0, "team")
				b.Leave(0, "team")
				require.NoError(t, send("a", protocol.Channel("team")))
			},
			want: [][]int{{}},
			mail: []string{"", "", ""},
		},
		{
			name: "joining after a send does not receive it, even before delivery",
			script: func(b *env.MemBus, send func(string, protocol.Address) error) {
				b.Join(0, "team")
				_ = send("c", protocol.Channel("team"))
				b.Join(1, "team")
				_ = send("c", protocol.Channel("team"))
			},
			want: [][]int{{0}, {0, 1}},
			mail: []string{"c c", "c", ""},
		},
		{
			name: "leaving after a send still receives it",
			script: func(b *env.MemBus, send func(string, protocol.Address) error) {
				b.Join(0, "team")
				b.Join(1, "team")
				_ = send("c", protocol.Channel("team"))
				b.Leave(1, "team")
				_ = send("c", protocol.Channel("team"))
			},
			want: [][]int{{0, 1}, {0}},
			mail: []string{"c c", "c", ""},
		},
		{
			name: "Reset empties every channel",
			script: func(b *env.MemBus, send func(string, protocol.Address) error) {
				b.Join(0, "team")
				b.Reset([]string{"a", "b", "c"})
				require.Error(t, send("c", protocol.Channel("team")))
			},
			wantErr: `channel "team", which has never had a member`,
			want:    [][]int{},
			mail:    []string{"", "", ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := env.NewMemBus()
			b.Reset([]string{"a", "b", "c"})
			var errs []error
			tc.script(b, func(from string, to protocol.Address) error {
				err := b.Send(protocol.Message{From: from, To: to, Kind: "k"}, 1)
				if err != nil {
					errs = append(errs, err)
				}
				return err
			})
			if tc.wantErr != "" {
				require.NotEmpty(t, errs)
				assert.ErrorIs(t, errs[0], env.ErrBadMessage)
				assert.ErrorContains(t, errs[0], tc.wantErr)
			} else {
				assert.Empty(t, errs)
			}
			// Recipients are fixed when sent: the log shows them before
			// delivery, and delivery does not change them.
			before := recipientsOf(b)
			b.Deliver()
			assert.Equal(t, tc.want, before)
			assert.Equal(t, tc.want, recipientsOf(b))
			for seat, want := range tc.mail {
				got := ""
				for k, m := range b.Mailbox(seat) {
					if k > 0 {
						got += " "
					}
					got += m.From
				}
				assert.Equal(t, want, got, "seat %d's mailbox", seat)
			}
		})
	}
}

func recipientsOf(b *env.MemBus) [][]int {
	out := [][]int{}
	for _, m := range b.Log() {
		out = append(out, append([]int{}, m.Recipients...))
	}
	return out
}

// TestQuietMessagesInformWithoutWaking: under the async schedule, an agent
// given only quiet messages does not act; woken by a message that is not
// quiet, it reads the quiet ones too, in delivery order.
func TestQuietMessagesInformWithoutWaking(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(s *env.Step) error
		ping  bool     // a sends b a message when it acts
		who   []string // step:agent of every turn
		inbox []string // b's inbox at its turn, kinds
	}{
		{
			name: "informed, then woken",
			start: func(s *env.Step) error {
				if err := s.Inform(1, "fact", "the price is 3"); err != nil {
					return err
				}
				return s.Tell(0, "go", "")
			},
			ping:  true,
			who:   []string{"1:a", "2:b"},
			inbox: []string{"fact", "ping"},
		},
		{
			name: "informed and never woken",
			start: func(s *env.Step) error {
				if err := s.Inform(1, "fact", "the price is 3"); err != nil {
					return err
				}
				return s.Tell(0, "go", "")
			},
			who: []string{"1:a"},
		},
		{
			name:  "a quiet broadcast wakes nobody",
			start: func(s *env.Step) error { return s.InformAll("fact", "the price is 3") },
			who:   nil,
		},
		{
			name: "a quiet message posted by an agent does not wake either",
			start: func(s *env.Step) error {
				if err := s.Post(protocol.Message{From: "a", To: "b", Kind: "fact", Quiet: true}); err != nil {
					return err
				}
				return s.Tell(0, "go", "")
			},
			ping:  true,
			who:   []string{"1:a", "2:b"},
			inbox: []string{"fact", "ping"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hooks := relayHooks{
				start: tc.start,
				apply: func(s *env.Step, moves []env.Move) error {
					for _, m := range moves {
						if m.Seat == 0 && tc.ping {
							if err := s.Send("a", "b", "ping", ""); err != nil {
								return err
							}
						}
					}
					return nil
				},
			}
			var inbox []string
			var seen int
			pol := agents.PolicyFunc(func(_ context.Context, o *agents.Observation) (agents.Action, error) {
				if o.Agent == "b" {
					for _, m := range o.Inbox {
						inbox = append(inbox, m.Kind)
					}
					seen = len(o.Seen)
				}
				return agents.Action{Text: "1"}, nil
			})
			ep := runOne(t, relayScenario(env.Async, 100, hooks, nil), pol,
				func(s *env.Setup) { s.Params = params(t, s.Scenario, map[string]string{"seats": "2"}) })
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			assert.Equal(t, env.EndQuiescent, ep.End)
			var who []string
			for _, a := range ep.Turns {
				who = append(who, fmt.Sprintf("%d:%s", a.Step, ep.Seats[a.Seat].ID))
			}
			assert.Equal(t, tc.who, who)
			assert.Equal(t, tc.inbox, inbox)
			assert.Equal(t, len(tc.inbox), seen, "Seen holds every message delivered, quiet ones too")
			// The quiet message is in the log, flagged, with its recipients.
			require.NotEmpty(t, ep.Messages)
			assert.True(t, ep.Messages[0].Quiet)
			assert.Equal(t, "fact", ep.Messages[0].Kind)
			assert.NotEmpty(t, ep.Messages[0].Recipients)
		})
	}
}

// TestResetEmptiesEveryMailbox: the mail of one episode is gone at the
// next, whatever the number of seats in between.
func TestResetEmptiesEveryMailbox(t *testing.T) {
	b := env.NewMemBus()
	b.Reset([]string{"a", "b", "c", "d"})
	require.NoError(t, b.Send(protocol.Message{From: "a", To: protocol.Broadcast, Kind: "k"}, 1))
	require.NoError(t, b.Send(protocol.Message{From: "b", To: "d", Kind: "k"}, 1))
	b.Deliver()
	require.Len(t, b.Mailbox(3), 2)
	for _, ids := range [][]string{{"a", "b"}, {"a", "b", "c", "d", "e"}, {"a", "b", "c", "d"}} {
		b.Reset(ids)
		for i := range ids {
			assert.Empty(t, b.Mailbox(i), "seat %d of %v", i, ids)
		}
	}
	require.NoError(t, b.Send(protocol.Message{From: "c", To: "a", Kind: "k"}, 1))
	b.Deliver()
	assert.Len(t, b.Mailbox(0), 1)
	assert.Empty(t, b.Mailbox(3))
}
