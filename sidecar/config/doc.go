// Package config reads the sidecar's configuration from its MEILISTREAM_*
// environment variables (koanf's env provider), checks it all at once
// (Load, Validate: every problem names its variable and what it accepts),
// masks its secrets wherever it is printed, and builds the root logger
// (NewLogger).
//
// The defaults of the settings other packages use are theirs (engine,
// lease, transform), and so is transform's table of job options that
// MEILISTREAM_JOB_<NAME>_<OPTION> is checked against; the main package
// maps the configuration onto each package's own options.
package config
