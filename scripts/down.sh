#!/usr/bin/env bash
# `make down`: stop every process `make demo` started (worker first, then servers), keeping data in .demo/.
source "$(dirname "$0")/services.sh"
services_down
