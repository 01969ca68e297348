// Package files is the deployer's confd-style files driver: it delivers a
// bundle of rendered files into a destination folder (Options.Dest) safely.
//
// # Contract
//
// Apply compares the bundle with what is in Dest: content, permission bits
// (Options.Mode, or Options.KeyMode for a file marked Secret: key material is
// never world-readable; with Options.KeepMode a file already there keeps its
// own, as confd does for a resource without mode) and, when Options.Owner or Options.Group is set,
// ownership. A missing Dest is created first, so a destination removed
// behind the driver's back is delivered again whole. When nothing
// differs and no file has to be removed, Apply changes nothing and runs no
// command. Otherwise, in this order:
//
//  1. The complete bundle (with CheckCmd; without, only the files about to
//     be installed) is staged in a fresh directory inside Dest
//     (".weft-stage-<random>", or ".weft-stage-<Name>.<random>", so that it is on the same filesystem), with the
//     final mode and owner already set; the files about to be installed are
//     fsynced.
//  2. CheckCmd, if set, runs against the staged copy ({{.src}} is the staged
//     Main file, {{.dir}} the staging directory). If it fails, nothing in Dest
//     has been touched and Apply returns an error wrapping ErrCheckFailed.
//  3. The manifest is rewritten to own the files about to be installed and
//     the directories made for them, and, with a ReloadCmd, to owe the
//     reload: a process killed from here on leaves the next Apply knowing
//     both, even one that finds every file in place.
//  4. Each changed file is renamed from the staging directory into place, so
//     a reader sees either the old or the new file, never a partial one, and
//     never a file with the wrong mode or owner. Atomicity is per file: a
//     reader looking at several files during the installation can see some
//     old and some new ones. Missing parent directories are created with
//     Options.DirMode. Only then are the files that left the bundle removed,
//     so a file that is still referenced is never missing.
//  5. The manifest is rewritten to what the driver then owns, and the
//     staging directory is removed (it is removed on every path, including
//     failures; one left by a killed process is removed by the next Apply).
//     With Options.KeepStaged, a copy of each staged file that was to be
//     installed is first left beside its place as KeptName(path)
//     (".app.conf.weft-stage"), also when CheckCmd refused it.
//  6. ReloadCmd, if set, runs once, no sooner than MinReloadInterval after the
//     previous successful reload of this Driver. If it fails, the files stay
//     in place (they passed the check) and Apply returns an error wrapping
//     ErrReloadFailed. The reload is recorded as pending in the manifest and
//     retried by the next Apply, even one that finds nothing to write, and
//     even by a new Driver after a restart.
//
// # What the driver owns in Dest
//
// The driver removes only what it owns: the files listed in its manifest
// ".weft-manifest.json" (every path of every bundle it applied), the
// directories it created itself (removed only once empty), its staging
// entries ".weft-stage-*", and the manifest. A driver with Options.Name N
// uses ".weft-manifest-N.json" and ".weft-stage-N.*" instead, so drivers
// with different names share a Dest as long as their bundles' files differ
// (confd resources writing /etc/app/a.conf and /etc/app/b.conf); every
// name starting with ".weft-manifest" or ".weft-stage-" is reserved. The
// copies Options.KeepStaged leaves are not owned: they stay until replaced
// by a newer copy. Any other file in Dest is left alone; if such a file or directory is in the way of the bundle's layout,
// Apply fails with ErrConflict before touching anything. Bundle paths are
// relative and slash-separated; absolute paths, ".." and the reserved names
// are rejected with ErrBadPath. All access goes through an os.Root, so a
// symbolic link inside Dest cannot make the driver write outside it.
//
// # Commands
//
// Both commands run with "/bin/sh -c", in Dest, with their stdout and stderr
// combined (the output is kept in Result and, trimmed, in errors). The values
// substituted into CheckCmd are shell-quoted when they need it, so do not quote
// them again. A command is killed, with every process in its process group,
// when the context of Apply is cancelled or when Options.CmdTimeout expires.
//
// # Serialization
//
// Calls of Apply and Drift on one Driver are serialized; waiting for a
// running Apply respects the context. Two Drivers, or two processes, must not
// deliver into the same Dest under the same Name.
package files
