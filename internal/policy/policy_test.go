package policy

import (
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/directory"
)

func ctr(name, tenant string) directory.Container {
	return directory.Container{ID: "id-" + name, Name: name, Tenant: tenant}
}

func TestDefaultTrustsOnlySameTenant(t *testing.T) {
	if ok, why := Trust(ctr("a", "blue"), ctr("b", "blue")); !ok || why != "" {
		t.Errorf("same tenant: %v %q, want trusted", ok, why)
	}
	if ok, why := Trust(ctr("a", "blue"), ctr("b", "green")); ok || why != ReasonTenantDiffers {
		t.Errorf("different tenants: %v %q, want %s", ok, why, ReasonTenantDiffers)
	}
}

func TestPolicyDocument(t *testing.T) {
	p, err := Parse([]byte(`{"trusted_tenant_pairs": [["blue", "green"]], "no_fast_path": ["legacy"]}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		a, b   directory.Container
		ok     bool
		reason string
	}{
		{ctr("a", "blue"), ctr("b", "green"), true, ""},
		{ctr("a", "green"), ctr("b", "blue"), true, ""}, // pairs hold both ways
		{ctr("a", "blue"), ctr("b", "red"), false, ReasonTenantDiffers},
		{ctr("legacy", "blue"), ctr("b", "blue"), false, ReasonNoFastPath},
		{ctr("a", "blue"), ctr("legacy", "blue"), false, ReasonNoFastPath},
		{ctr("a", "red"), ctr("b", "red"), true, ""},
	}
	for _, c := range cases {
		ok, why := p.Trust(c.a, c.b)
		if ok != c.ok || why != c.reason {
			t.Errorf("Trust(%s/%s, %s/%s) = %v %q, want %v %q", c.a.Name, c.a.Tenant, c.b.Name, c.b.Tenant, ok, why, c.ok, c.reason)
		}
		// Both agents of a connection ask with the ends swapped.
		if ok2, why2 := p.Trust(c.b, c.a); ok2 != ok || why2 != why {
			t.Errorf("Trust is not symmetric for %s/%s", c.a.Name, c.b.Name)
		}
	}
}

func TestParse(t *testing.T) {
	for _, doc := range []string{"", "{}"} {
		p, err := Parse([]byte(doc))
		if err != nil || len(p.TrustedTenantPairs) != 0 || len(p.NoFastPath) != 0 {
			t.Errorf("Parse(%q) = %+v, %v; want the default", doc, p, err)
		}
	}
	for doc, says := range map[string]string{
		`{"trusted_tenants": []}`:                   "unknown field",
		`{"trusted_tenant_pairs": [["blue", ""]]}`:  "not a pair",
		`{"trusted_tenant_pairs": [["a","b","c"]]}`: "not a pair",
		`not json`: "invalid character",
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Parse(%s) = %v, want an error saying %q", doc, err, says)
		}
	}
}
