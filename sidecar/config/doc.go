// Package config reads the sidecar's configuration from its MEILISTREAM_*
// environment variables (koanf's env provider), checks it all at once
// (Load, Validate: every problem names its variable and what it accepts),
// masks its secrets wherever it is printed, and builds the root logger
// (NewLogger).
//
// The defaults of the settings other packages use are theirs (engine,
// lease, transform): config imports them, and transform's table of job
// options to check MEILISTREAM_JOB_<NAME>_<OPTION>. Nothing imports config
// but the main package, which maps it onto each package's own options.
package config
