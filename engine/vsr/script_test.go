package vsr

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/scripts")

// TestScripts runs the protocol scenarios in testdata/scripts. Each file is commands, one a line, then a
// line "----" and the output the commands print; go test ./engine/vsr -run TestScripts -rewrite
// regenerates the output. Commands (replicas by member index):
//
//	cluster n=3              a fresh group of n replicas (first command)
//	propose c=1 req=1 d=1    client c's request req adds d to its counter, on the current primary
//	deliver                  deliver every message until the network is quiet
//	heartbeat                every primary's Commit entry to its backups, then deliver
//	tick n=5                 n ticks of every live replica, delivering after each
//	down 0 / up 0            stop replica 0 (its state kept in memory) / let it run again
//	restart 0                rebuild replica 0 from its disk
//	silent 1                 replica 1's heartbeat timeout expired (OnPrimarySilent)
//	cut 0 / heal             drop every message to and from replica 0 / stop dropping
//	status                   print each replica's view, status, op, commit and counter
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
	var c *cluster
	var out strings.Builder
	for n, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		args := map[string]uint64{}
		var idx []int
		for _, f := range fields[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				args[k] = mustUint(t, v)
			} else {
				idx = append(idx, int(mustUint(t, f)))
			}
		}
		if c == nil && fields[0] != "cluster" {
			t.Fatalf("line %d: the first command must be cluster", n+1)
		}
		switch fields[0] {
		case "cluster":
			c = newCluster(t, int(args["n"]))
		case "propose":
			err := c.propose(args["c"], args["req"], args["c"], args["d"])
			fmt.Fprintf(&out, "propose c=%d req=%d: %v\n", args["c"], args["req"], errText(err))
		case "deliver":
			c.deliverAll()
		case "heartbeat":
			c.heartbeat()
		case "tick":
			c.tick(int(args["n"]))
		case "down", "up":
			for _, i := range idx {
				c.down[i] = fields[0] == "down"
			}
		case "restart":
			for _, i := range idx {
				c.restart(i)
			}
		case "silent":
			for _, i := range idx {
				c.replicas[i].OnPrimarySilent()
			}
			c.deliverAll()
		case "cut":
			cut := map[uint8]bool{}
			for _, i := range idx {
				cut[uint8(i)] = true
			}
			c.cut = func(from, to uint8) bool { return cut[from] || cut[to] }
		case "heal":
			c.cut = nil
		case "status":
			printStatus(&out, c)
		default:
			t.Fatalf("line %d: unknown command %q", n+1, fields[0])
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(script+"----\n"+out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if out.String() != want {
		t.Fatalf("output differs\n--- got\n%s--- want\n%s", out.String(), want)
	}
}

func printStatus(out *strings.Builder, c *cluster) {
	for i, r := range c.replicas {
		state := r.status.String()
		if c.down[i] {
			state = "down"
		}
		role := "backup"
		if r.IsPrimary() {
			role = "primary"
		}
		keys := ""
		for k := uint64(1); k <= 9; k++ {
			if v, ok := c.machines[i].counters[k]; ok {
				keys += fmt.Sprintf(" c%d=%d", k, v)
			}
		}
		fmt.Fprintf(out, "r%d %s %s view=%d log_view=%d op=%d commit=%d%s\n", i, state, role, r.View(), r.LogView(),
			r.Op(), r.Commit(), keys)
	}
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func mustUint(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("bad number %q", s)
	}
	return v
}
