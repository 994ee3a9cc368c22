package agentapi

import (
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// An agent older than LISTING ignores it and answers with its connections:
// the client refuses that answer rather than read connections as QPs.
func TestListingOfAnOlderAgentRefused(t *testing.T) {
	old := protocol.New(protocol.TypeOK, 1, protocol.U32(protocol.AttrCount, 0))
	if err := sameListing(old, protocol.ListQPs); err == nil || !strings.Contains(err.Error(), "predates") {
		t.Fatalf("QPs from a reply without LISTING: %v, want an error saying the agent predates the list", err)
	}
	if err := sameListing(old, protocol.ListConns); err != nil {
		t.Fatalf("connections from a reply without LISTING: %v", err)
	}
	cur := protocol.New(protocol.TypeOK, 1, protocol.U8(protocol.AttrListing, protocol.ListQPs))
	if err := sameListing(cur, protocol.ListQPs); err != nil {
		t.Fatalf("QPs from a reply with LISTING 1: %v", err)
	}
	if err := sameListing(cur, protocol.ListVerbsMem); err == nil {
		t.Fatal("verbs memory from a reply with LISTING 1: no error")
	}
}
