package env

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Bus carries messages between the agents of one episode.
//
// Delivery order is deterministic: a message sent during step t is delivered
// at the end of step t (visible from step t+1 on), and every mailbox receives
// messages in the order they were sent. Within a step the game applies moves
// in seat order, so messages are ordered by (logical time, seat order of the
// move that caused them, order of sending). A broadcast or channel message
// reaches every recipient except its sender.
//
// A Bus serves one episode at a time and is not safe for concurrent use;
// Reset readies it for the next episode.
type Bus interface {
	// Reset starts a new episode whose agents are ids, in seat order.
	Reset(ids []string)
	// Join adds seat to channel; joining twice is harmless.
	Join(seat int, channel string)
	// Leave removes seat from channel.
	Leave(seat int, channel string)
	// Send validates m, stamps its Time and Seq, and queues it. It returns
	// the stamped message.
	Send(m protocol.Message, time int) (protocol.Message, error)
	// Deliver moves every queued message into its recipients' mailboxes.
	Deliver()
	// Mailbox returns every message delivered to seat so far, in delivery
	// order. The caller must not modify or keep it past the next Deliver.
	Mailbox(seat int) []protocol.Message
	// Log returns every message sent in this episode, in send order, with
	// the seats each was delivered to (none yet for a message not yet
	// delivered). The slice belongs to the caller after the episode; Reset
	// starts a new one.
	Log() []episode.Message
}

// ErrBadMessage is wrapped by Send's errors.
var ErrBadMessage = errors.New("bad message")

// MemBus is the in-process Bus.
type MemBus struct {
	ids      []string
	index    map[string]int
	channels map[string][]int // members in seat order
	mail     [][]protocol.Message
	queue    int // log[queue:] is not yet delivered
	log      []episode.Message
	// recipients backs the log's Recipients: one array per episode,
	// sliced, rather than one per message.
	recipients []int
}

// NewMemBus returns an empty in-process bus.
func NewMemBus() *MemBus { return &MemBus{} }

// Reset implements Bus.
func (b *MemBus) Reset(ids []string) {
	// The engine hands out the same ids slice for the same seats, and a
	// fresh one otherwise: the index of the same slice is still right.
	if len(ids) == 0 || len(b.ids) != len(ids) || &b.ids[0] != &ids[0] {
		if b.index == nil {
			b.index = make(map[string]int, len(ids))
		}
		clear(b.index)
		for i, id := range ids {
			b.index[id] = i
		}
	}
	b.ids = ids
	clear(b.channels)
	if cap(b.mail) < len(ids) {
		b.mail = make([][]protocol.Message, len(ids))
	}
	b.mail = b.mail[:len(ids)]
	for i := range b.mail {
		b.mail[i] = b.mail[i][:0]
	}
	b.queue = 0
	b.log = nil        // the previous episode keeps its log
	b.recipients = nil // and its recipients
}

// Join implements Bus.
func (b *MemBus) Join(seat int, channel string) {
	if b.channels == nil {
		b.channels = map[string][]int{}
	}
	members := b.channels[channel]
	if i, found := slices.BinarySearch(members, seat); !found {
		b.channels[channel] = slices.Insert(members, i, seat)
	}
}

// Leave implements Bus.
func (b *MemBus) Leave(seat int, channel string) {
	members := b.channels[channel]
	if i, found := slices.BinarySearch(members, seat); found {
		b.channels[channel] = slices.Delete(members, i, i+1)
	}
}

// Send implements Bus.
func (b *MemBus) Send(m protocol.Message, time int) (protocol.Message, error) {
	if m.From != protocol.EnvSender {
		if _, ok := b.index[m.From]; !ok {
			return m, fmt.Errorf("%w: sender %q is not an agent of this episode", ErrBadMessage, m.From)
		}
	}
	switch {
	case m.To.IsBroadcast():
	case strings.HasPrefix(string(m.To), "#"):
		name, _ := m.To.ChannelName()
		if _, ok := b.channels[name]; !ok {
			return m, fmt.Errorf("%w: channel %q has never had a member", ErrBadMessage, name)
		}
	default:
		if _, ok := b.index[string(m.To)]; !ok {
			return m, fmt.Errorf("%w: addressee %q is not an agent of this episode", ErrBadMessage, m.To)
		}
	}
	m.Time = time
	m.Seq = len(b.log)
	b.log = append(b.log, episode.Message{Message: m})
	return m, nil
}

// Deliver implements Bus.
func (b *MemBus) Deliver() {
	for k := b.queue; k < len(b.log); k++ {
		m := &b.log[k]
		start := len(b.recipients)
		switch {
		case m.To.IsBroadcast():
			for i, id := range b.ids {
				if id != m.From {
					b.deliver(i, m)
				}
			}
		case strings.HasPrefix(string(m.To), "#"):
			name, _ := m.To.ChannelName()
			for _, i := range b.channels[name] {
				if b.ids[i] != m.From {
					b.deliver(i, m)
				}
			}
		default:
			b.deliver(b.index[string(m.To)], m)
		}
		m.Recipients = b.recipients[start:len(b.recipients):len(b.recipients)]
	}
	b.queue = len(b.log)
}

func (b *MemBus) deliver(seat int, m *episode.Message) {
	b.mail[seat] = append(b.mail[seat], m.Message)
	b.recipients = append(b.recipients, seat)
}

// Mailbox implements Bus.
func (b *MemBus) Mailbox(seat int) []protocol.Message { return b.mail[seat] }

// Log implements Bus.
func (b *MemBus) Log() []episode.Message { return b.log }
