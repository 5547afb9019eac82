package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/config"
)

// TestClients: cluster.clients names every node's client address; a node left out is reached at its
// peer address with the port plus one; keys outside cluster.peers and undialable addresses are refused
// naming the key.
func TestClients(t *testing.T) {
	peers := "[cluster]\npeers = { 1 = \"10.0.0.1:7001\", 2 = \"10.0.0.2:7001\", 3 = \"10.0.0.3:65535\" }\n"
	cases := []struct {
		name, clients, want, err string
	}{
		{"derived", "", "", "cluster.clients: node 3's peer port is 65535"},
		{"explicit for the last", `clients = { 3 = "10.0.0.3:9000" }`, "1=10.0.0.1:7002 2=10.0.0.2:7002 3=10.0.0.3:9000", ""},
		{"unknown node", `clients = { 3 = "10.0.0.3:9000", 4 = "10.0.0.4:1" }`, "", `cluster.clients: key "4" is not a node`},
		{"port 0", `clients = { 3 = "10.0.0.3:0" }`, "", "cluster.clients.3: 10.0.0.3:0 is not an address a client can dial"},
		{"unspecified", `clients = { 3 = "0.0.0.0:9000" }`, "", "cluster.clients.3: 0.0.0.0:9000 is not an address"},
		{"host name", `clients = { 3 = "db3:9000" }`, "", "cluster.clients.3: \"db3:9000\" is not an ip:port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(peers+tc.clients+"\n"), t.TempDir())
			if tc.err != "" {
				if err == nil || !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range c.ClientAddrs {
				got = append(got, p.Addr.String())
				got[len(got)-1] = string(rune('0'+p.Node)) + "=" + got[len(got)-1]
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Fatalf("client addresses %q, want %q", s, tc.want)
			}
		})
	}
}

// TestClients_DefaultsFollowPeers: the defaults' client addresses are the peers' ports plus one, so a
// file that only changes the peers keeps that rule.
func TestClients_DefaultsFollowPeers(t *testing.T) {
	c, err := config.Parse([]byte("[cluster]\npeers = { 1 = \"10.0.0.1:8001\", 2 = \"10.0.0.2:8001\", 3 = \"10.0.0.3:8001\" }\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.ClientAddrs) != 3 || c.ClientAddrs[1].Addr.String() != "10.0.0.2:8002" {
		t.Fatalf("client addresses %v", c.ClientAddrs)
	}
	d, err := config.Parse(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range d.ClientAddrs {
		if p.Addr.Port() != d.Nodes[i].Addr.Port()+1 {
			t.Fatalf("default client address of node %d: %s, peer %s", p.Node, p.Addr, d.Nodes[i].Addr)
		}
	}
}
