"""The chamber: where a run happens, and what it is made of.

The container runtime (Docker through aiodocker, confined to `caisson.chamber._docker`),
what the chamber sees of the host (`caisson.chamber._view`: its own /etc network files,
its mount table), the bridge firewall, the seccomp profile (`caisson.chamber.seccomp_profile`),
the sandbox (a one-commit worktree minus the exclusion set) with its containment scan, the
scratch directories that hold it (`caisson.chamber.scratch`) and the reaping of those whose
recorder is dead (`caisson.chamber._reap`), the chamber's environment
(`caisson.chamber.envpin`) and the images built offline from `images/`
(`caisson.chamber.image`). Knows nothing of witnesses or detectors.
"""

from typing import TYPE_CHECKING

from ledger.lazy import lazy_face
from caisson.chamber._view import CHAMBER_HOSTNAME, ETC_FILES, mountinfo_seen
from caisson.chamber._containment import containment_hits, prompt_windows, scan_tree
from caisson.chamber._firewall import guard_bridge, unguard_bridge
from caisson.chamber._seccomp import BASE_PROFILE, SeccompProfile, seccomp_profile
from caisson.chamber.envpin import INJECTION_SWITCHES, ChamberEnv, build_env, parse_env_assignments
from caisson.chamber.image import build_image, image_id, image_tag, recipe_digest, recipe_tags
from caisson.chamber.sandbox import Sandbox, build_sandbox, glob_to_regex, remove_sandbox, tree_digest

if TYPE_CHECKING:
    from caisson.chamber._docker import (
        LOG_CAP_BYTES,
        RUN_LABEL,
        ChamberNetwork,
        ContainerLimits,
        ContainerResult,
        ContainerSpec,
        ContainerStarted,
        Engine,
        demux_stdcopy,
        open_engine,
    )
    from caisson.chamber._reap import Reaped, RecorderIdentity, orphan_reason, reap, recorder_identity, recorder_labels
    from caisson.chamber.scratch import mount_chamber_fs, open_scratch

__all__ = [
    "BASE_PROFILE",
    "CHAMBER_HOSTNAME",
    "ETC_FILES",
    "SeccompProfile",
    "seccomp_profile",
    "INJECTION_SWITCHES",
    "LOG_CAP_BYTES",
    "RUN_LABEL",
    "ChamberEnv",
    "ChamberNetwork",
    "ContainerLimits",
    "ContainerResult",
    "ContainerSpec",
    "ContainerStarted",
    "Engine",
    "Reaped",
    "RecorderIdentity",
    "Sandbox",
    "build_env",
    "build_image",
    "build_sandbox",
    "containment_hits",
    "demux_stdcopy",
    "glob_to_regex",
    "guard_bridge",
    "image_id",
    "image_tag",
    "mount_chamber_fs",
    "mountinfo_seen",
    "open_engine",
    "open_scratch",
    "orphan_reason",
    "parse_env_assignments",
    "prompt_windows",
    "reap",
    "recipe_digest",
    "recipe_tags",
    "recorder_identity",
    "recorder_labels",
    "remove_sandbox",
    "scan_tree",
    "tree_digest",
    "unguard_bridge",
]

# The container runtime (aiodocker under trio) and the reaping that uses it are imported on
# first use, so a detector or a report that only needs the chamber's pure parts does not pay
# for them; the scratch directories are made by the recorder only.
__getattr__, __dir__ = lazy_face(__name__, {
    "_docker": ("LOG_CAP_BYTES", "RUN_LABEL", "ChamberNetwork", "ContainerLimits", "ContainerResult",
                "ContainerSpec", "ContainerStarted", "Engine", "demux_stdcopy", "open_engine"),
    "_reap": ("Reaped", "RecorderIdentity", "orphan_reason", "reap", "recorder_identity", "recorder_labels"),
    "scratch": ("mount_chamber_fs", "open_scratch"),
}, globals())
