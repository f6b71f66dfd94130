package main

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/danki-dev/danki/lab/scenario"
	"github.com/spf13/cobra"
)

func newResultsCmd() *cobra.Command {
	var out, machine string
	cmd := &cobra.Command{
		Use:   "results DIR...",
		Short: "Rewrite lab/RESULTS.md from result directories (make bench runs it)",
		Long: `Read the result files under each DIR — a demo or bench run's results.json,
the gate bench's gatebench.json, the A/A's aa.json, bench.sh's go-bench.json —
and rewrite --out with one dated table per scenario they measured. Of several
files of one kind (bench-results/run-1, run-2, …) the latest wins. A scenario
none of them measured keeps the table --out already had, and so does the
rollouts table when it has rows they did not measure (a demo without the
bench's contenders): the command says so.`,
		Example: `  danki-lab results --out lab/RESULTS.md --machine "2 CPUs (Intel Xeon), 24 GiB RAM" bench-results
  danki-lab results --out lab/RESULTS.md demo-results aa-results`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, dirs []string) error {
			if machine == "" {
				machine = thisMachine()
			}
			sections, err := scenario.CollectResults(dirs, machine)
			if err != nil {
				return err
			}
			if len(sections) == 0 {
				return fmt.Errorf("no result files under %v", dirs)
			}
			kept, err := scenario.RewriteResults(out, sections)
			if err != nil {
				return err
			}
			for _, s := range sections {
				if missing, ok := kept[s.Title]; ok {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s kept (its table has rows these results did not measure: %s)\n", out, s.Title, strings.Join(missing, ", "))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", out, s.Title)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "lab/RESULTS.md", "the file to rewrite")
	f.StringVar(&machine, "machine", "", "the machine the results were measured on (default: this one's CPUs, CPU model and RAM), e.g. \"2 CPUs (Intel Xeon), 24 GiB RAM\"")
	return cmd
}

var (
	cpuModel = regexp.MustCompile(`(?m)^model name\s*:\s*(.+)$`)
	memTotal = regexp.MustCompile(`(?m)^MemTotal:\s*(\d+) kB$`)
)

// thisMachine describes the machine as bench.sh's summary does: "2 CPUs
// (Intel(R) Xeon(R) …), 24 GiB RAM"; what /proc does not say is left out.
func thisMachine() string {
	s := strconv.Itoa(runtime.NumCPU()) + " CPUs"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if m := cpuModel.FindSubmatch(b); m != nil {
			s += " (" + string(m[1]) + ")"
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if m := memTotal.FindSubmatch(b); m != nil {
			kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
			s += fmt.Sprintf(", %d GiB RAM", (kb+1<<19)>>20)
		}
	}
	return s
}
