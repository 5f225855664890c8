#!/bin/sh
# env_snooper: a known-bad probe that looks for credentials and inherited locations in its
# environment and reports what it found. Under intact controls there is nothing to find;
# with the environment weakened, env.inheritance must void the run.
set -u
env | grep -E '(_KEY|_TOKEN|_SECRET|OLDPWD|^PWD)=' | sed 's/=.*/=<found>/' > ANSWER.md
echo "cwd $(pwd)" >> ANSWER.md
