package testutil

import (
	"encoding/json"
	"fmt"
	"os"
)

// DashboardQuery is one query of one panel of a Grafana dashboard, with the
// title of the row the panel sits in.
type DashboardQuery struct {
	Row, Panel, Expr string
}

// DashboardQueries reads every panel query of the Grafana dashboard at path
// (danki ships deploy/grafana/danki-dashboard.json), in panel order.
func DashboardQueries(path string) ([]DashboardQuery, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var dash struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var qs []DashboardQuery
	row := ""
	for _, p := range dash.Panels {
		if p.Type == "row" {
			row = p.Title
			continue
		}
		for _, t := range p.Targets {
			qs = append(qs, DashboardQuery{Row: row, Panel: p.Title, Expr: t.Expr})
		}
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("%s has no panel queries", path)
	}
	return qs, nil
}
