package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

func init() {
	register("migrate", command{summary: "move a running container to another host, its IP and connections kept: migrate NAME --to HOST [--dry-run] [-o json]",
		run: migrateContainer, needsRoot: true})
}

func migrateContainer(g *Global, args []string) error {
	fs := newFlags(g, "migrate")
	to := fs.String("to", "", "host to move the container to (h1, h2, ...)")
	dry := fs.Bool("dry-run", false, "say whether it can move and why not, and change nothing")
	format := fs.String("o", "text", "output format: text or json (durations in ns)")
	// The name may come first, as the and the README's examples have it.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		name = ""
	}
	if name == "" || *to == "" || fs.NArg() > 1 || (*format != "text" && *format != "json") {
		return fmt.Errorf("%w: freeflow migrate NAME --to HOST [--dry-run] [-o text|json]", errUsage)
	}
	rep, err := g.containers().Migrate(context.Background(), name, *to, *dry)
	if err != nil {
		return err
	}
	if *format == "json" {
		return json.NewEncoder(g.Out).Encode(rep)
	}
	if rep.DryRun {
		fmt.Fprintf(g.Out, "%s can migrate from %s to %s", rep.Name, rep.From, rep.To)
		if rep.Parked > 0 {
			fmt.Fprintf(g.Out, " (its %d shared-memory %s parked on plain TCP first)", rep.Parked, plural(rep.Parked, "connection"))
		}
		fmt.Fprintln(g.Out)
		return nil
	}
	fmt.Fprintf(g.Out, "%s moved from %s to %s: down %.1f ms (switch %.1f, checkpoint %.1f, %.1f MiB of images; restore %.1f, resume %.1f)\n",
		rep.Name, rep.From, rep.To, ms(rep.Down.Seconds()), ms(rep.Switch.Seconds()), ms(rep.Dump.Seconds()), float64(rep.Images)/(1<<20),
		ms(rep.Restore.Seconds()), ms(rep.Resume.Seconds()))
	if rep.Parked > 0 {
		were := "were"
		if rep.Parked == 1 {
			were = "was"
		}
		fmt.Fprintf(g.Out, "%d shared-memory %s %s parked on plain TCP first, in %.1f ms (the container ran on meanwhile)\n",
			rep.Parked, plural(rep.Parked, "connection"), were, ms(rep.Park.Seconds()))
	}
	return nil
}

func ms(s float64) float64 { return s * 1000 }
