package main

import (
	"os"
	"strings"
	"testing"
)

// What README's session shows, and TestNewUserSession checks the commands print.
const (
	readmeCreate  = "created stream \"demo\": id 1, incarnation 1, 3 copies, majority_durable\n"
	readmeProduce = "produced 3 records to \"demo\" at offsets 0..2 (2 batch(es), all confirmed)\n"
	readmeLast2   = "$ ringstream consume demo --last 2\nworld\nthird line\n"
	readmeHealth  = "cluster: healthy; 3 of 3 nodes up, 1 streams, 0 under-replicated, 0 without an owner, 0 recoveries pending\n"
	readmeStatus  = "node 1 of cluster 1: serving, 1 shard(s), registered true\n"
	readmeClear   = "node 1 (active controller): nothing needs attention\n"
	readmeDown    = "node 3 is down (client "
	// Keys and headers: a produce that splits lines at --key-separator, and a consume --format.
	readmeProduceKeyed  = "$ printf 'user-1:signed up\\nuser-2:logged in\\n' | ringstream produce demo --key-separator : --header src=web\n"
	readmeProducedKeyed = "produced 2 records to \"demo\" at offsets 3..4 (1 batch(es), all confirmed)\n"
	readmeFormatCmd     = "$ ringstream consume demo --last 2 --format '%o %k=%v (%h)\\n'\n"
	readmeFormat        = readmeFormatCmd + "3 user-1=signed up (src=web)\n4 user-2=logged in (src=web)\n"

	readmeCursorList        = "stream \"demo\": confirmed tail 3, head 0, 1 consumer\n\nCONSUMER  CURSOR  LAG\nreader    3       0\n"
	readmeCursorReset       = "reset consumer \"reader\" on stream \"demo\": cursor 3 -> 1, lag 2\n"
	readmeCursorDescribe    = "consumer \"reader\" on stream \"demo\": cursor 1, lag 2 (confirmed tail 3, head 0)\n"
	readmeCursorDelete      = "deleted consumer \"audit\" of stream \"demo\" (its cursor was at 1)\n"
	readmeDescribeConsumers = "consumers: 1 consumer\n\nCONSUMER  CURSOR  LAG\nreader    3       0\n"
)

// TestREADME_ShowsWhatTheCommandsPrint: README's session holds the lines TestNewUserSession checks.
func TestREADME_ShowsWhatTheCommandsPrint(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{readmeCreate, readmeProduce, readmeLast2, readmeProduceKeyed + readmeProducedKeyed, readmeFormat, readmeHealth, readmeStatus, readmeClear, readmeDown,
		readmeCursorList, readmeCursorReset, readmeCursorDescribe, readmeCursorDelete, readmeDescribeConsumers,
		`stream "demo" (id 1) under-replicated: owner 1, followers [2 3]: node 3 is down`,
		"stream \"demo\": id 1, incarnation 1, 3 copies, majority_durable, epoch 1, owner node 1, followers [2 3]\nconfirmed tail 3\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("README does not show %q", want)
		}
	}
}
