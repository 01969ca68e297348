package config

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weftio/weft/pkg/config/confdir"
)

// Confd makes a target a confd confdir: each template resource of
// <Dir>/conf.d becomes its own target (see Config.expandConfd).
type Confd struct {
	// Dir is the confdir (relative to weft.yaml's folder).
	Dir string `json:"dir"`
	// Prefix is confd's global prefix, joined before every resource's.
	Prefix string `json:"prefix,omitempty"`
	// SyncOnly (confd's -sync-only) delivers the files without their
	// resources' check_cmd and reload_cmd.
	SyncOnly bool `json:"sync_only,omitempty"`
	// KeepStageFile (confd's -keep-stage-file) leaves the staged copy of
	// each resource's file beside its dest, as .<name>.weft-stage.
	KeepStageFile bool `json:"keep_stage_file,omitempty"`
}

// MainFile is the bundle path of a target's main file: the base name of
// a confd resource's dest, else haproxy.cfg.
func (t Target) MainFile() string {
	if t.ConfdResource != nil {
		return filepath.Base(t.ConfdResource.Dest)
	}
	return "haproxy.cfg"
}

// ConfdTargetName is the name of the target made of the resource file
// of a confd target: "<target>-<file below conf.d without .toml>", with
// every byte other than letters, digits, '-' and '_' made a '-'.
func ConfdTargetName(target, confDir, file string) string {
	rel, err := filepath.Rel(confDir, file)
	if err != nil {
		rel = filepath.Base(file)
	}
	rel = strings.TrimSuffix(filepath.ToSlash(rel), ".toml")
	b := []byte(target + "-" + rel)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	return string(b)
}

// expandConfd replaces every confd target by one target per template
// resource of its confdir. Each takes the confd target's render, validate
// (default kinds: template) and deploy.instance and deploy.drift_check, and
// gets a files deploy into the folder of the resource's dest, named after
// the new target so that resources share a folder, with the resource's
// owner, group, mode, check_cmd, reload_cmd, min_reload_interval and
// command timeouts, keeping its staged file with keep_stage_file. A confdir that does not load is reported with every
// bad file. A resource without mode keeps an existing file's mode and
// gives a new file 0644, as confd does. Where this differs from confd: the
// larger of check_cmd_timeout and reload_cmd_timeout bounds both commands,
// and reload_cmd's {{.src}} is dest (the staged file is gone by then).
func (c *Config) expandConfd(ps *problems) {
	bad := ps.add
	for _, name := range sortedKeys(c.Targets) {
		t := c.Targets[name]
		if t.Confd == nil {
			continue
		}
		f := path{"targets", name}
		delete(c.Targets, name)
		if err := checkConfdTarget(t); err != "" {
			bad(f, "%s", err)
			continue
		}
		cd := *t.Confd
		cd.Dir = c.resolve(cd.Dir)
		specs, err := confdir.Load(cd.Dir, cd.Prefix)
		if err != nil {
			ps.addErr(f.k("confd"), err)
			continue
		}
		if len(specs) == 0 {
			bad(f.k("confd", "dir"), "%s has no template resources in conf.d", cd.Dir)
		}
		dests := map[string]string{}
		for _, s := range specs {
			rn := ConfdTargetName(name, filepath.Join(cd.Dir, "conf.d"), s.File)
			s.Dest = c.resolve(s.Dest)
			if other, dup := dests[s.Dest]; dup {
				bad(f.k("confd"), "%s and %s both write %s", other, s.File, s.Dest)
			}
			dests[s.Dest] = s.File
			if _, dup := c.Targets[rn]; dup {
				bad(f.k("confd"), "%s gives the target name %s, which is already used", s.File, rn)
				continue
			}
			c.Targets[rn] = confdTarget(rn, t, cd, s)
			if ps.targetOf == nil {
				ps.targetOf = map[string]string{}
			}
			ps.targetOf[rn] = name
		}
	}
}

// checkConfdTarget names what a confd target sets that its resources
// decide ("" when nothing).
func checkConfdTarget(t Target) string {
	switch {
	case t.HAProxyConfig.Template != "" || t.Library != "" || len(t.Maps)+len(t.Files)+len(t.Certificates)+len(t.TemplateSnippets)+len(t.Fragments) > 0:
		return "a confd target takes its templates from the confdir: no template sections or library"
	case t.Base != "" || t.Deploy.Dest != "" || len(t.Deploy.Instances) > 0:
		return "a confd target is deployed where each resource's dest says: no base, deploy.dest or deploy.instances"
	case t.Deploy.Driver != "" && t.Deploy.Driver != DriverFiles:
		return "a confd target is deployed by the files driver"
	}
	return ""
}

// confdTarget is the target of one resource s of the confd target t.
func confdTarget(name string, t Target, cd Confd, s confdir.Spec) Target {
	dir := filepath.Dir(s.Dest)
	out := Target{
		Confd:         &cd,
		ConfdResource: &s,
		Base:          dir,
		Render:        t.Render,
		Validate:      t.Validate,
		Deploy: Deploy{
			Driver:            DriverFiles,
			Name:              name,
			Instance:          t.Deploy.Instance,
			DriftCheck:        t.Deploy.DriftCheck,
			Dest:              dir,
			Owner:             confdID(s.UID, s.Owner),
			Group:             confdID(s.GID, s.Group),
			CheckCmd:          s.CheckCmd,
			ReloadCmd:         s.ReloadCmd,
			MinReloadInterval: Duration(s.MinReloadInterval),
			CmdTimeout:        Duration(max(s.CheckCmdTimeout, s.ReloadCmdTimeout)),
			KeepStaged:        cd.KeepStageFile,
		},
	}
	if s.ModeSet {
		out.Deploy.Mode = fmt.Sprintf("%04o", s.Mode)
	} else {
		out.Deploy.KeepMode = true
	}
	if cd.SyncOnly {
		out.Deploy.CheckCmd, out.Deploy.ReloadCmd = "", ""
	} else if s.ReloadCmd != "" {
		// confd gives reload_cmd {{.src}} and {{.dest}}; once the file is
		// in place both are dest. A template that does not expand was
		// refused by confdir.
		if cmd, err := s.ReloadCommand(s.Dest, s.Dest); err == nil {
			out.Deploy.ReloadCmd = cmd
		}
	}
	if out.Render.Debounce == nil && s.Debounce != 0 {
		out.Render.Debounce = Dur(s.Debounce)
	}
	if len(out.Validate.Kinds) == 0 && cmp.Or(out.Validate.Expect, ExpectConfigured) == ExpectConfigured {
		out.Validate.Kinds = []string{KindTemplate}
	}
	return out
}

// confdID is confd's ownership as the files driver takes it: the numeric
// id when set, else the name ("" leaves the process's own).
func confdID(id int, name string) string {
	if id >= 0 {
		return strconv.Itoa(id)
	}
	return name
}
