package stream_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/scripts")

// TestScripts runs the protocol scenarios in testdata/scripts. Each file is commands, one a line,
// then a line "----" and what the commands print; go test ./engine/stream -run TestScripts -rewrite
// regenerates the output. Node 1 owns the stream. Commands:
//
//	cluster n=3 policy=majority   a fresh stream of n copies (policy majority, all, or count=k)
//	produce p=1 seq=0 n=2 size=100 to=1  producer p's batch seq of n records, to node to (the owner)
//	fetch off=0 wait=0 to=1       a consumer's fetch from off, waiting up to wait ms, to node to
//	commit-cursor name=c off=4    consumer c commits offset 4 (get-cursor name=c reads it)
//	cut 3 / heal                  drop every message to and from node 3 / stop dropping
//	nosync 3 / sync 3             node 3's storage stops syncing / syncs what it holds and resumes
//	crash 3                       node 3 restarts from what it had synced
//	seal 2 3 epoch=2              nodes 2 and 3 are sealed at epoch 2 (storage fenced them)
//	reassign epoch=2 owner=2 followers=3  every node the assignment names takes it in place
//	tick n=5                      n ticks of every node, delivering after each
//	status                        each node's role, tails and confirmed tail
//
// After each command the messages in flight are delivered and the client replies printed.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/scripts/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runScript(t, file) })
	}
}

func runScript(t *testing.T, file string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	script, want, _ := strings.Cut(string(raw), "----\n")
	var s scriptRun
	for n, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		args := map[string]string{}
		var nodes []uint16
		for _, f := range fields[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				args[k] = v
			} else {
				nodes = append(nodes, uint16(num(t, f)))
			}
		}
		if err := s.do(t, fields[0], args, nodes); err != nil {
			t.Fatalf("%s:%d: %s: %v", file, n+1, line, err)
		}
	}
	got := s.out.String()
	if *rewrite {
		if err := os.WriteFile(file, []byte(script+"----\n"+got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != want {
		t.Fatalf("%s: output differs (run with -rewrite to accept)\ngot:\n%s\nwant:\n%s", file, got, want)
	}
}

func num(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("number %q: %v", s, err)
	}
	return v
}

type scriptRun struct {
	cl    *cluster
	a     meta.Assignment
	first meta.Assignment // the cluster's first assignment: crash asg=first reopens a copy with it
	cut   map[uint16]bool
	out   strings.Builder
}

func (s *scriptRun) do(t *testing.T, cmd string, args map[string]string, nodes []uint16) error {
	arg := func(k string, def uint64) uint64 {
		if v, ok := args[k]; ok {
			return num(t, v)
		}
		return def
	}
	if cmd != "cluster" && s.cl == nil {
		return fmt.Errorf("no cluster yet")
	}
	switch cmd {
	case "cluster":
		s.a = meta.Assignment{Epoch: 1, Owner: 1, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}
		switch p := args["policy"]; {
		case p == "all":
			s.a.Policy = meta.Policy{Kind: meta.PolicyLocalDurable}
		case strings.HasPrefix(p, "count"):
			s.a.Policy = meta.Policy{Kind: meta.PolicyCountDurable, Count: uint8(arg("count", 1))}
		}
		for f := uint64(2); f <= arg("n", 3); f++ {
			s.a.Followers = append(s.a.Followers, uint16(f))
		}
		s.first = s.a
		s.cut = map[uint16]bool{}
		s.cl = newCluster(t, s.a)
		s.cl.drop = func(e envelope) bool { return s.cut[e.from] || s.cut[e.to] }
	case "produce":
		p := arg("p", 0)
		s.cl.produce(uint16(arg("to", 1)), p, p, arg("seq", 0), uint32(arg("n", 1)), payload(int(arg("seq", 0)), int(arg("size", 100))))
	case "fetch":
		fetch(s.cl, uint16(arg("to", 1)), arg("off", 0), 1<<20, 0, uint32(arg("wait", 0)))
	case "commit-cursor", "get-cursor":
		kind := stream.KindCommitCursor
		if cmd == "get-cursor" {
			kind = stream.KindGetCursor
		}
		m := cursorMsg(kind, args["name"], arg("off", 0))
		m.Client = 7
		s.cl.nodes[uint16(arg("to", 1))].c.Step(&m)
		s.cl.nodes[uint16(arg("to", 1))].ready(t)
	case "cut", "heal":
		s.cut = map[uint16]bool{}
		for _, n := range nodes {
			s.cut[n] = true
		}
	case "nosync", "sync":
		for _, n := range nodes {
			nd := s.cl.nodes[n]
			nd.autoSync = cmd == "sync"
			if cmd == "sync" {
				nd.sync(t)
				nd.ready(t)
			}
		}
	case "crash":
		a := s.a
		if args["asg"] == "first" {
			a = s.first // a node that was away through the failovers opens from what it last knew
		}
		for _, n := range nodes {
			old := s.cl.nodes[n]
			rec, cur, epochs := old.rec[:old.recSync], old.cur[:old.curSync], old.epochs
			if args["empty"] == "1" {
				rec, cur, epochs = nil, nil, nil // the copy never opened before: a new disk
			}
			s.cl.nodes[n] = newNode(t, testConfig(n), a, rec, cur, epochs)
			fmt.Fprintf(&s.out, "n%d restarts at %d\n", n, s.cl.nodes[n].recTail())
		}
	case "seal":
		for _, n := range nodes {
			s.cl.nodes[n].c.Sealed(uint32(arg("epoch", 2)))
			s.cl.nodes[n].ready(t)
		}
	case "reassign":
		a := meta.Assignment{Epoch: uint32(arg("epoch", 2)), Owner: uint16(arg("owner", 1)), Policy: s.a.Policy}
		for _, f := range strings.Split(args["followers"], ",") {
			if f != "" {
				a.Followers = append(a.Followers, uint16(num(t, f)))
			}
		}
		for _, id := range s.cl.ids {
			if a.Includes(id) {
				s.cl.nodes[id].reassign(t, a)
			}
		}
		s.a = a
	case "tick":
		s.cl.tick(int(arg("n", 1)))
	case "status":
		s.status()
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	s.cl.settle()
	s.replies()
	return nil
}

func (s *scriptRun) status() {
	for _, id := range s.cl.ids {
		n := s.cl.nodes[id]
		app, dur := n.c.Tails()
		fmt.Fprintf(&s.out, "n%d %v appended=%d durable=%d confirmed=%d cursors=%d", id, n.c.Role(), app, dur, n.c.Confirmed(), n.curTail())
		if id == s.a.Owner {
			for _, f := range s.a.Followers {
				fmt.Fprintf(&s.out, " n%d@%d", f, n.c.FollowerMatch(f))
			}
		}
		s.out.WriteString("\n")
	}
}

func (s *scriptRun) replies() {
	for _, id := range s.cl.ids {
		for _, r := range s.cl.nodes[id].takeReplies() {
			switch r.Kind {
			case stream.ReplyProduce:
				fmt.Fprintf(&s.out, "reply p%d: produce base=%d count=%d dup=%v\n", r.Client, r.Produce.BaseOffset, r.Produce.Count, r.Produce.Duplicate)
			case stream.ReplyFetch:
				fmt.Fprintf(&s.out, "reply fetch: base=%d count=%d confirmed=%d\n", r.Fetch.BaseOffset, r.Fetch.Count, r.Fetch.ConfirmedTail)
			case stream.ReplyError:
				fmt.Fprintf(&s.out, "reply c%d: error %d owner=%d %q\n", r.Client, r.Error.Code, r.Error.Owner, r.Error.Message)
			case stream.ReplyCommitCursor, stream.ReplyGetCursor:
				fmt.Fprintf(&s.out, "reply c%d: cursor offset=%d found=%v\n", r.Client, r.Cursor.Offset, r.Cursor.Found)
			default:
				fmt.Fprintf(&s.out, "reply c%d: kind %d\n", r.Client, r.Kind)
			}
		}
	}
}
