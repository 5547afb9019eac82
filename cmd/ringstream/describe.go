package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/adminapi"
)

// describeDoc is `stream describe --json`: the stream as the metadata view holds it, and each copy of
// its assignment as its node serves it. The confirmed tail is the highest any copy reports (the
// owner's, unless it is down); a copy's lag is how far its durable tail trails it.
type describeDoc struct {
	Name          string         `json:"name"`
	ID            uint64         `json:"id"`
	Incarnation   uint32         `json:"incarnation"`
	CopyCount     uint8          `json:"copy_count"`
	Policy        string         `json:"policy"`
	Epoch         uint32         `json:"epoch"`
	Owner         uint16         `json:"owner"`
	Followers     []uint16       `json:"followers"`
	Recovery      string         `json:"recovery,omitempty"`
	ConfirmedTail uint64         `json:"confirmed_tail"`
	Copies        []describeCopy `json:"copies"`
	MetadataFrom  uint16         `json:"metadata_from_node"`
	// Retention is the owner's node's [storage] retention (the nodes apply their own; they are
	// normally configured alike). Nil when the owner's node did not answer.
	Retention *adminapi.Retention `json:"retention,omitempty"`
	// Consumers are the stream's consumers with their cursor and lag, as the owner answers a cursor
	// list (client port, the profile's addresses); ConsumersError says why they could not be read
	// (the owner down, a recovery pending), and Consumers is then empty.
	Consumers      []cursorJSON `json:"consumers"`
	ConsumersError string       `json:"consumers_error,omitempty"`
	// NotServed names what the nodes do not serve yet, so the document cannot show it.
	NotServed []string `json:"not_served"`
}

// describeCopy is one copy of the assignment.
type describeCopy struct {
	Node uint16 `json:"node"`
	// State is "serving" (its node lists it open), "not open" (its node is up and lists it closed or
	// not at all) or the node's state ("down", "link up": alive, its admin listener not asked).
	State      string `json:"state"`
	Role       string `json:"role,omitempty"`
	Epoch      uint32 `json:"epoch,omitempty"`
	Shard      int    `json:"shard"`
	Appended   uint64 `json:"appended_tail"`
	Durable    uint64 `json:"durable_tail"`
	Confirmed  uint64 `json:"confirmed_tail"`
	CursorTail uint64 `json:"cursor_tail"`
	Lag        uint64 `json:"lag_records"` // the stream's confirmed tail minus this copy's durable tail
	Head       uint64 `json:"head"`        // the record log's retained head
	// BytesRetained is the copy's record and cursor logs' durable bytes on disk.
	BytesRetained int64 `json:"bytes_retained"`
}

// notServed is what `stream describe` cannot show: nothing the nodes hold is left out now.
var notServed = []string{}

func newStreamDescribeCommand() *cobra.Command {
	var f adminFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "describe NAME",
		Short: "Show a stream's owner, followers, epoch, each copy's tails and lag, and its consumers",
		Long: "Read /v1/status from every node of the admin list (--admin, or the profile's) and print the\n" +
			"stream as the metadata primary holds it (owner, followers, epoch, policy, pending recovery) with\n" +
			"each copy of its assignment: its node's state, role, record tails (appended, durable, confirmed),\n" +
			"cursor log tail, lag behind the stream's confirmed tail, retained head and bytes on disk, and the\n" +
			"owner's node's retention settings; then the stream's consumers with their cursor and lag (the\n" +
			"confirmed tail minus the cursor), read from the owner over the client port (the profile's\n" +
			"addresses and secret, as `cursor list` reads them). --json prints one document.",
		Args: streamArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := f.addrs(cmd)
			if err != nil {
				return err
			}
			h := buildHealth(f.statuses(cmd.Context(), list))
			if h.metaSource == nil {
				if len(h.statusesByNodeID) == 0 {
					return &exitError{code: exitUnavailable, err: fmt.Errorf("no admin listener answered: %s", unreachableText(h))}
				}
				return &exitError{code: exitUnavailable, err: fmt.Errorf("no metadata replica in the admin list answered: " +
					"the streams are known to replicas only")}
			}
			doc, ok := describeStream(h, args[0])
			if !ok {
				return &exitError{code: exitNotFound, err: fmt.Errorf("no stream %q (metadata of node %d)", args[0],
					h.metaSource.Node)}
			}
			readConsumers(cmd, min(f.timeout, 5*time.Second), doc)
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), doc)
			}
			return printDescribe(cmd.OutOrStdout(), doc)
		},
	})
	f.register(cmd.Flags())
	return cmd
}

// readConsumers fills doc's consumers from the owner's cursor list, or says why it could not.
func readConsumers(cmd *cobra.Command, timeout time.Duration, doc *describeDoc) {
	cf := clientFlags{cluster: defaultClusterID, timeout: timeout}
	err := withClient(cmd, &cf, func(ctx context.Context, c *client.Client) error {
		l, err := c.ListCursors(ctx, doc.Name)
		if err != nil {
			return err
		}
		doc.Consumers = toCursorListJSON(doc.Name, l).Consumers
		return nil
	})
	if err != nil {
		doc.Consumers, doc.ConsumersError = []cursorJSON{}, err.Error()
	}
}

// describeStream builds the document of stream name from the health's statuses.
func describeStream(h *healthDoc, name string) (*describeDoc, bool) {
	var s *adminapi.Stream
	for i := range h.metaSource.Streams {
		if h.metaSource.Streams[i].Name == name {
			s = &h.metaSource.Streams[i]
		}
	}
	if s == nil {
		return nil, false
	}
	doc := &describeDoc{Name: s.Name, ID: s.ID, Incarnation: s.Incarnation, CopyCount: s.Copies, Policy: s.Policy,
		Epoch: s.Epoch, Owner: s.Owner, Followers: s.Followers, Recovery: s.Recovery, MetadataFrom: h.metaSource.Node,
		NotServed: notServed, Copies: []describeCopy{}, Consumers: []cursorJSON{}}
	for _, node := range append([]uint16{s.Owner}, s.Followers...) {
		if node == 0 {
			continue
		}
		dc := describeCopy{Node: node, State: h.nodeState(node)}
		if st := h.statusesByNodeID[node]; st != nil {
			if node == s.Owner {
				doc.Retention = &st.Retention
			}
			dc.State = "not open"
			for _, c := range st.Copies {
				if c.Stream != s.ID || c.Incarnation != s.Incarnation {
					continue
				}
				dc.Role, dc.Epoch, dc.Shard = c.Role, c.Epoch, c.Shard
				dc.Appended, dc.Durable, dc.Confirmed, dc.CursorTail = c.Appended, c.Durable, c.Confirmed, c.CursorTail
				dc.Head, dc.BytesRetained = c.Head, c.RecordBytes+c.CursorBytes
				if c.Open {
					dc.State = "serving"
				}
			}
		}
		doc.ConfirmedTail = max(doc.ConfirmedTail, dc.Confirmed)
		doc.Copies = append(doc.Copies, dc)
	}
	for i := range doc.Copies {
		c := &doc.Copies[i]
		c.Lag = doc.ConfirmedTail - min(c.Durable, doc.ConfirmedTail)
	}
	return doc, true
}

func printDescribe(w io.Writer, d *describeDoc) error {
	fmt.Fprintf(w, "stream %q: id %d, incarnation %d, %d copies, %s, epoch %d, owner node %d, followers %v\n", d.Name, d.ID,
		d.Incarnation, d.CopyCount, d.Policy, d.Epoch, d.Owner, d.Followers)
	fmt.Fprintf(w, "confirmed tail %d", d.ConfirmedTail)
	if d.Recovery != "" {
		fmt.Fprintf(w, ", recovery %s", d.Recovery)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nNODE\tSTATE\tROLE\tEPOCH\tHEAD\tAPPENDED\tDURABLE\tCONFIRMED\tCURSOR-LOG\tLAG\tBYTES\n")
	for _, c := range d.Copies {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", c.Node, c.State, dash(c.Role), c.Epoch, c.Head,
			c.Appended, c.Durable, c.Confirmed, c.CursorTail, c.Lag, bytesText(c.BytesRetained))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r := d.Retention; r != nil {
		fmt.Fprintf(w, "\nretention (owner's node): size %s, age %s\n", retentionText(r.Bytes, bytesText(r.Bytes)),
			retentionText(r.AgeMs, (time.Duration(r.AgeMs)*time.Millisecond).String()))
	}
	switch {
	case d.ConsumersError != "":
		fmt.Fprintf(w, "\nconsumers: not read: %s\n", d.ConsumersError)
	case len(d.Consumers) == 0:
		fmt.Fprintln(w, "\nconsumers: none")
	default:
		fmt.Fprintf(w, "\nconsumers: %s\n", consumersText(len(d.Consumers)))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nCONSUMER\tCURSOR\tLAG")
		for _, c := range d.Consumers {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", c.Consumer, c.Cursor, c.Lag)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(d.NotServed) > 0 {
		fmt.Fprintf(w, "\nnot served by the nodes yet: %s\n", strings.Join(d.NotServed, ", "))
	}
	return nil
}

// retentionText is text for a retention bound, or "kept" when it is 0 (no bound).
func retentionText(v int64, text string) string {
	if v == 0 {
		return "kept"
	}
	return "at most " + text
}

// bytesText prints a byte count in binary units (KiB, MiB, GiB), exact below 1 KiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}
