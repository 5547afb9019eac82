package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ringstream/ringstream/client"
)

// Produce records with confirm and read them back. It needs a running cluster (`ringstream cluster
// up` prints the address and the secret), so it has no checked output.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Addrs: []string{"127.0.0.1:7002"}, Cluster: 1,
		Secret: []byte("the cluster secret")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.CreateStream(ctx, "orders", client.StreamOptions{Copies: 3}); err != nil {
		log.Fatal(err)
	}
	p, err := c.Producer(client.ProducerConfig{Stream: "orders", Codec: client.CodecZstd,
		OnConfirm: func(cf client.Confirmed) { fmt.Println("confirmed at", cf.BaseOffset) }})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range []string{"one", "two", "three"} {
		if err := p.Append(ctx, []byte(r)); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil { // sends the open batch and waits for its confirm
		log.Fatal(err)
	}

	cs, err := c.Consumer("orders", 0, client.FetchOptions{Wait: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	recs, err := cs.Poll(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for recs.Next() {
		fmt.Println(recs.Offset(), string(recs.Value()))
	}
	if err := c.CommitCursor(ctx, "orders", "billing", cs.Offset()); err != nil {
		log.Fatal(err)
	}
}

// A consumer that follows a stream from its committed cursor, long-polling at the tail.
func ExampleConsumer_Poll() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addrs: []string{"127.0.0.1:7002"}, Cluster: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	from, _, err := c.Cursor(ctx, "orders", "billing")
	if err != nil {
		log.Fatal(err)
	}
	cs, err := c.Consumer("orders", from, client.FetchOptions{Wait: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for range 10 {
		recs, err := cs.Poll(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for recs.Next() {
			fmt.Printf("%d: %s\n", recs.Offset(), recs.Value())
		}
		if err := recs.Err(); err != nil {
			log.Fatal(err)
		}
		if err := c.CommitCursor(ctx, "orders", "billing", cs.Offset()); err != nil {
			log.Fatal(err)
		}
	}
}

// Records with a key, headers and a timestamp, read back from the first one appended in the last hour
// (by the nodes' append time).
func ExampleProducer_AppendRecord() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addrs: []string{"127.0.0.1:7002"}, Cluster: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := c.Producer(client.ProducerConfig{Stream: "orders"}) // FormatRecords by default
	if err != nil {
		log.Fatal(err)
	}
	err = p.AppendRecord(ctx, client.Record{Key: []byte("user-1"), Value: []byte("signed up"),
		Headers: []client.Header{{Key: []byte("src"), Value: []byte("web")}}}) // Timestamp: now
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
	from, err := c.OffsetForTime(ctx, "orders", time.Now().Add(-time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	recs, err := c.Fetch(ctx, "orders", from, client.FetchOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for recs.Next() {
		fmt.Printf("%d %s=%s at %s", recs.Offset(), recs.Key(), recs.Value(), recs.Timestamp().Format(time.RFC3339))
		for h := recs.Headers(); h.Next(); {
			fmt.Printf(" %s=%s", h.Header().Key, h.Header().Value)
		}
		fmt.Println()
	}
	if err := recs.Err(); err != nil {
		log.Fatal(err) // ErrCorruptBatch, or ErrUnknownFormat for a batch of a newer record format
	}
}
