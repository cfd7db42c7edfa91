package protocol_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
)

func TestAddress(t *testing.T) {
	tests := []struct {
		name      string
		addr      protocol.Address
		broadcast bool
		isChannel bool
		channel   string
		agent     string // "" when not a single agent
	}{
		{"agent", protocol.To("alice"), false, false, "", "alice"},
		{"broadcast", protocol.Broadcast, true, false, "", ""},
		{"channel", protocol.Channel("team-red"), false, true, "team-red", ""},
		{"empty channel name", protocol.Channel(""), false, true, "", ""},
		{"empty address", protocol.Address(""), false, false, "", ""},
		{"env", protocol.To(protocol.EnvSender), false, false, "", "env"},
		{"star inside an id", protocol.To("a*b"), false, false, "", "a*b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.broadcast, tt.addr.IsBroadcast())

			name, isChannel := tt.addr.ChannelName()
			assert.Equal(t, tt.channel, name)
			assert.Equal(t, tt.isChannel, isChannel)

			agent, isAgent := tt.addr.Agent()
			assert.Equal(t, tt.agent, agent)
			assert.Equal(t, tt.agent != "", isAgent)

			// An address is exactly one of broadcast, channel, agent, or
			// (only when empty) none.
			kinds := 0
			for _, b := range []bool{tt.addr.IsBroadcast(), isChannel, isAgent} {
				if b {
					kinds++
				}
			}
			if tt.addr == "" {
				assert.Zero(t, kinds)
			} else {
				assert.Equal(t, 1, kinds)
			}
		})
	}
}

func TestChannelRoundTrip(t *testing.T) {
	for _, name := range []string{"a", "team red", "#nested", "*"} {
		got, ok := protocol.Channel(name).ChannelName()
		assert.True(t, ok)
		assert.Equal(t, name, got)
	}
}

func TestMessageJSON(t *testing.T) {
	m := protocol.Message{From: "alice", To: protocol.Channel("red"), Kind: "say", Payload: "hi \"all\"", Time: 3, Seq: 0}
	data, err := json.Marshal(m)
	require.NoError(t, err)
	assert.JSONEq(t, `{"from":"alice","to":"#red","kind":"say","payload":"hi \"all\"","time":3,"seq":0}`, string(data))
	var back protocol.Message
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, m, back)
}
