package cni

import (
	"os"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/freeflow-net/freeflow/internal/state"
)

func TestConfListParsesAndIsIdempotent(t *testing.T) {
	l := state.Layout{Cluster: "t", Base: t.TempDir()}
	h := state.NewHost(2)
	if err := WriteConfList(l, h); err != nil {
		t.Fatal(err)
	}
	st1, _ := os.Stat(ConfListFile(l, "h2"))
	if err := WriteConfList(l, h); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(ConfListFile(l, "h2"))
	if !os.SameFile(st1, st2) {
		t.Fatal("rewriting an unchanged configuration replaced the file")
	}
	list, err := libcni.LoadConfList(l.CNIConfDir("h2"), NetworkName)
	if err != nil {
		t.Fatalf("libcni cannot load the list: %v", err)
	}
	if list.CNIVersion != "1.0.0" || len(list.Plugins) != 2 ||
		list.Plugins[0].Network.Type != "bridge" || list.Plugins[1].Network.Type != PluginType {
		t.Fatalf("unexpected list %+v", list)
	}
	conf, err := loadNetConf(list.Plugins[1].Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if conf.AgentSocket != l.AdminSocket("h2") || conf.Host != "h2" || conf.Cluster != "t" {
		t.Fatalf("freeflow entry %+v", conf)
	}
}
