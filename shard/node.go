package shard

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// Node runs the S shards of one node and its peer listener. Build it with NewNode (which binds the
// listener, so Addr is known before the peers are), add groups, Start it with the peer list, Stop it.
type Node struct {
	cfg      Config
	listenFD int
	addr     netip.AddrPort
	shards   []*Shard
	cpus     []int
	pending  []Group

	mu          sync.Mutex // guards started, stopped, groupIDs and pending against concurrent callers
	started     bool
	stopped     bool
	stopDone    chan struct{} // closed when Stop finished
	groupIDs    map[uint64]bool
	perShard    []int // groups per shard, for GroupsPerShardMax
	nodeHandler NodeHandler

	clientFDs     []int // one listening socket per shard (SO_REUSEPORT), when ClientListen is set
	clientAddr    netip.AddrPort
	clientHandler ClientHandler
	clients       nodeClients // client connections on every shard (ClientConfig.ConnectionsMax)
	kafkaFDs      []int       // one listening socket per shard (SO_REUSEPORT), when KafkaListen is set
	kafkaAddr     netip.AddrPort
	kafkaHandler  KafkaHandler

	wg      sync.WaitGroup // one per shard goroutine
	drained sync.WaitGroup // every shard has no operation left on its ring

	tickHook func(s *Shard, tick uint64) // tests only (export_test.go); runs on the shard goroutine
}

// NewNode checks cfg and binds the peer listener.
func NewNode(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, w := range cfg.Schedule.Warnings() {
		cfg.Logger.Warn(w)
	}
	n := &Node{cfg: cfg, listenFD: -1, groupIDs: make(map[uint64]bool), perShard: make([]int, cfg.Shards),
		stopDone: make(chan struct{})}
	if cfg.PinCores {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return nil, fmt.Errorf("shard: sched_getaffinity: %w", err)
		}
		for cpu := 0; cpu < 1024; cpu++ {
			if set.IsSet(cpu) {
				n.cpus = append(n.cpus, cpu)
			}
		}
	}
	if err := n.listen(); err != nil {
		return nil, err
	}
	if err := n.listenClients(); err != nil {
		n.closeListener()
		return nil, err
	}
	if err := n.listenKafka(); err != nil {
		n.closeListener()
		return nil, err
	}
	return n, nil
}

func (n *Node) listen() error {
	sa, err := sockaddrOf(netip.AddrPortFrom(n.cfg.Listen.Addr(), max(n.cfg.Listen.Port(), 1)))
	if err != nil {
		return err
	}
	domain := unix.AF_INET
	if s6, ok := sa.(*unix.SockaddrInet6); ok {
		domain = unix.AF_INET6
		s6.Port = int(n.cfg.Listen.Port())
	} else {
		sa.(*unix.SockaddrInet4).Port = int(n.cfg.Listen.Port())
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("shard: listen socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return fmt.Errorf("shard: bind %v: %w", n.cfg.Listen, err)
	}
	if err := unix.Listen(fd, 512); err != nil {
		unix.Close(fd)
		return fmt.Errorf("shard: listen %v: %w", n.cfg.Listen, err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("shard: getsockname: %w", err)
	}
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		n.addr = netip.AddrPortFrom(netip.AddrFrom4(b.Addr), uint16(b.Port))
	case *unix.SockaddrInet6:
		n.addr = netip.AddrPortFrom(netip.AddrFrom16(b.Addr), uint16(b.Port))
	}
	n.listenFD = fd
	return nil
}

// Addr is the address peers connect to.
func (n *Node) Addr() netip.AddrPort { return n.addr }

// Shards returns the node's shards (after Start).
func (n *Node) Shards() []*Shard { return n.shards }

// Start builds the shards, one goroutine each locked to its thread (and pinned when PinCores), each
// creating its own ring there, and starts their loops once every ring exists. peers are the other
// nodes; every shard keeps one link to each.
func (n *Node) Start(peers []Peer) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.stopped {
		return ErrStarted
	}
	n.started = true
	peers = slices.Clone(peers)
	slices.SortFunc(peers, func(a, b Peer) int { return cmp.Compare(a.Node, b.Node) })
	if err := n.buildShards(peers); err != nil {
		n.closeListener()
		return err
	}
	if err := n.registerMetrics(n.cfg.Registry); err != nil {
		n.releaseWakers()
		n.closeListener()
		return err
	}
	ready := make(chan error, len(n.shards))
	begin := make(chan bool)
	n.wg.Add(len(n.shards))
	n.drained.Add(len(n.shards))
	for _, s := range n.shards {
		go s.main(ready, begin)
	}
	var firstErr error
	for range n.shards {
		if err := <-ready; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		close(begin) // every shard sees false, closes its ring and ends
		n.wg.Wait()
		n.closeListener()
		n.stopped = true
		close(n.stopDone)
		return firstErr
	}
	for range n.shards {
		begin <- true
	}
	return nil
}

func (n *Node) buildShards(peers []Peer) error {
	S := n.cfg.Shards
	n.shards = make([]*Shard, S)
	for i := range S {
		s := &Shard{
			node: n, index: i, cfg: &n.cfg, log: n.cfg.Logger,
			rng:      rand.New(rand.NewPCG(n.cfg.Seed, uint64(n.cfg.Node)<<32|uint64(i))),
			sched:    heartbeat.NewSchedule(n.cfg.Schedule),
			byID:     make(map[uint64]*groupSlot),
			byNode:   make(map[uint16]*link),
			inbound:  make([]*spscQueue, S),
			outbound: make([]*spscQueue, S),
			wakeOwed: make([]bool, S),
			accept:   i == 0,
		}
		w, err := newWaker()
		if err != nil {
			n.releaseWakers()
			return err
		}
		s.waker = w
		n.shards[i] = s
	}
	for i, s := range n.shards {
		for j, t := range n.shards {
			if i != j {
				q := newSPSCQueue(n.cfg.QueueCapacity)
				s.outbound[j] = q
				t.inbound[i] = q
			}
		}
		for _, p := range peers {
			if p.Node == n.cfg.Node {
				continue
			}
			l, err := newLink(s, p)
			if err != nil {
				n.releaseWakers()
				return err
			}
			s.links = append(s.links, l)
			s.byNode[p.Node] = l
		}
	}
	for _, g := range n.pending {
		n.shards[ShardOf(g.ID(), S)].addGroup(g)
	}
	n.pending = nil
	for _, s := range n.shards {
		for _, gs := range s.groups {
			s.restartGroup(gs, gs.g.Role(), gs.g.View(), gs.g.Primary())
		}
	}
	return nil
}

// main is a shard goroutine: lock, pin, create the ring, wait for every shard's ring, run, drain, close.
func (s *Shard) main(ready chan<- error, begin <-chan bool) {
	defer s.node.wg.Done()
	lockThread()
	if len(s.node.cpus) > 0 {
		cpu := s.node.cpus[s.index%len(s.node.cpus)]
		if err := pinToCPU(cpu); err != nil {
			s.node.drained.Done()
			s.waker.close()
			ready <- fmt.Errorf("shard %d: pin to cpu %d: %w", s.index, cpu, err)
			return
		}
	}
	r, err := ring.New(s.cfg.Ring)
	if err != nil {
		s.node.drained.Done()
		s.waker.close()
		ready <- fmt.Errorf("shard %d: %w", s.index, err)
		return
	}
	s.msgTarget = r // MsgRing needs the backend's own ring as its target, not a wrapper
	if s.cfg.WrapRing != nil {
		r = s.cfg.WrapRing(s.index, r)
	}
	r.SetMsgHandler(s)
	s.ring = r
	ready <- nil
	if !<-begin {
		s.node.drained.Done()
		r.Close()
		s.waker.close()
		return
	}
	s.run()
	// Every operation of this ring has completed. Wait until every shard is there too, so no shard
	// posts a wakeup to a ring that is already closed, then release everything.
	s.node.drained.Done()
	s.node.drained.Wait()
	s.release()
}

// releaseWakers closes the wakeup sockets of the shards built so far (Start failed before they ran).
func (n *Node) releaseWakers() {
	for _, s := range n.shards {
		if s != nil && s.waker != nil {
			s.waker.close()
		}
	}
}

// beginDrain stops the shard: no new tick, every group told to finish or abandon its operations,
// every socket shut down so its operations complete, and a deadline armed after which whatever is
// still in flight is abandoned.
func (s *Shard) beginDrain() {
	s.draining = true
	for _, gs := range s.groups {
		if st, ok := gs.g.(Stopper); ok {
			st.OnStop()
		}
	}
	if s.waker.inFlight {
		s.waker.force() // completes the wakeup Recv, which is not armed again
	}
	if err := s.ring.Timeout(s, tagDrain, s.cfg.DrainTimeout, 0); err == nil {
		s.drainArmed = true
	} else {
		s.log.Warn("shard: drain deadline could not be armed", "shard", s.index, "err", err)
	}
	for _, l := range s.links {
		l.shutdown()
	}
	for _, c := range slices.Clone(s.conns) {
		c.close()
	}
	if s.accept && s.node.listenFD >= 0 {
		_ = unix.Shutdown(s.node.listenFD, unix.SHUT_RDWR)
	}
	s.cl.drain()
}

// release closes the ring and whatever the queues still hold (sockets handed on during the drain).
func (s *Shard) release() {
	var m message
	for _, q := range s.inbound {
		if q == nil {
			continue
		}
		for q.Pop(&m) {
			if m.kind == messageConn {
				unix.Close(m.fd)
			}
		}
	}
	for _, l := range s.links {
		assert.True(l.fd < 0, "shard: link socket open after the drain")
	}
	assert.True(len(s.conns) == 0, "shard: connection open after the drain")
	assert.True(len(s.cl.conns) == 0, "shard: client connection open after the drain")
	if err := s.ring.Close(); err != nil {
		s.log.Warn("shard: ring close", "shard", s.index, "err", err)
	}
	s.waker.close()
}

// Stop drains and ends every shard and closes the listener. It returns once every shard goroutine has
// ended and every socket and ring is closed. It is safe to call more than once and from several
// goroutines (each returns once the first call finished), but not from a shard goroutine.
func (n *Node) Stop() error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		<-n.stopDone
		return nil
	}
	n.stopped = true
	started := n.started
	n.mu.Unlock()
	// Not under n.mu: a shard may call Run, Wake or AddGroup while it drains.
	if started {
		for _, s := range n.shards {
			s.stopping.Store(true)
			s.waker.wake()
		}
		n.wg.Wait()
	}
	err := n.closeListener()
	close(n.stopDone)
	return err
}

func (n *Node) closeListener() error {
	n.closeClientListeners()
	if n.listenFD < 0 {
		return nil
	}
	err := unix.Close(n.listenFD)
	n.listenFD = -1
	if err != nil {
		return fmt.Errorf("shard: close listener: %w", err)
	}
	return nil
}

// LinkStatus is one shard's link to one peer, as Status reports it.
type LinkStatus struct {
	Shard int
	Peer  uint16
	Up    bool
}

// Status reports every shard's link state. Safe from any goroutine.
func (n *Node) Status() []LinkStatus {
	var out []LinkStatus
	for _, s := range n.shards {
		for _, l := range s.links {
			out = append(out, LinkStatus{Shard: s.index, Peer: l.peer.Node, Up: l.up.Load()})
		}
	}
	return out
}

// SendFrame implements Sender for the shard's groups.
func (s *Shard) SendFrame(node uint16, frame []byte) error {
	l := s.byNode[node]
	if l == nil {
		return fmt.Errorf("%w: %d", ErrUnknownPeer, node)
	}
	return l.sendFrame(frame)
}

// registerMetrics adds the node's shard metrics to reg, when there is one (never the global registry).
func (n *Node) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	if err := reg.Register(newCollector(n.cfg.Node, n.shards)); err != nil {
		return fmt.Errorf("shard: register metrics: %w", err)
	}
	return nil
}

// Ring implements Sender: the shard's ring, for groups' own operations (shard goroutine only).
func (s *Shard) Ring() ring.Ring { return s.ring }
