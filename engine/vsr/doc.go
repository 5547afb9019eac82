// Package vsr is the metadata group's consensus: Viewstamped Replication as a pure state machine.
//
// It owns the replica's protocol state (view, status, log, commit point, client table) and drives a
// StateMachine with committed ops. Input is Tick, Step (a message from a peer or a client), Propose and
// the heartbeat signals that shard/heartbeat derives (OnCommitEntry, OnPrimarySilent, OnQuorumLost);
// output is an Effects value from Ready: storage writes to make durable, messages to send, client
// replies. It never reads the clock, never calls ring, never starts a goroutine and never blocks.
//
// Work in progress: the replica itself lands in following commits; StateMachine is the contract
// engine/meta builds against.
package vsr
