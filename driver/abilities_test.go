package driver_test

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/driver"
)

// plain has no optional ability.
type plain struct{}

func (plain) Name() string                                                 { return "plain" }
func (plain) Create(context.Context, *driver.Spec) (*driver.Handle, error) { return nil, nil }
func (plain) DialGuest(context.Context, *driver.Handle) (net.Conn, error)  { return nil, nil }
func (plain) Exited(*driver.Handle) <-chan struct{}                        { return nil }
func (plain) Destroy(context.Context, *driver.Handle) error                { return nil }
func (plain) Adopt(context.Context, *driver.Handle) error                  { return nil }
func (plain) Cleanup(context.Context, map[string]bool) ([]string, error) {
	return nil, nil
}

// pausing can pause and resize.
type pausing struct{ plain }

func (pausing) Pause(context.Context, *driver.Handle) error  { return nil }
func (pausing) Resume(context.Context, *driver.Handle) error { return nil }
func (pausing) SetLimits(context.Context, *driver.Handle, float64, int64, int64) error {
	return nil
}

// drifted has a Pause whose signature is not Pauser's: no ability.
type drifted struct{ plain }

func (drifted) Pause(context.Context, string) error          { return nil }
func (drifted) Resume(context.Context, *driver.Handle) error { return nil }

// wrapped wraps a driver, as the service's restore does.
type wrapped struct{ driver.Driver }

func (w wrapped) Unwrap() driver.Driver { return w.Driver }

// TestAbilities: a driver's abilities are the interfaces its type
// implements, found through wrappers, and Abilities lists them.
func TestAbilities(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    driver.Driver
		want []driver.Ability
	}{
		{"none", plain{}, nil},
		{"pause and resize", pausing{}, []driver.Ability{driver.AbilityPause, driver.AbilityResize}},
		{"drifted signature", drifted{}, nil},
		{"through a wrapper", wrapped{pausing{}}, []driver.Ability{driver.AbilityPause, driver.AbilityResize}},
		{"wrapper of none", wrapped{plain{}}, nil},
		{"nil wrapped", wrapped{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := driver.Abilities(tc.d); !slices.Equal(got, tc.want) {
				t.Errorf("Abilities = %v, want %v", got, tc.want)
			}
			p, ok := driver.As[driver.Pauser](tc.d)
			if want := slices.Contains(tc.want, driver.AbilityPause); ok != want || (ok && p == nil) {
				t.Errorf("As[Pauser] = %v, %v; want ok %v", p, ok, want)
			}
		})
	}
	if got := driver.AllAbilities(); len(got) != 6 || got[0] != driver.AbilityPause {
		t.Errorf("AllAbilities = %v", got)
	}
}
