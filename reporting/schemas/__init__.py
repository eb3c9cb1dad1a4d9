"""What the reports hold, typed: report.json, a site's page, sweeps, replicate sets, the gate's
verdict, what a run lost."""
