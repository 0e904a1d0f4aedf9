#!/bin/bash
# Builds and checks NOVA's container images with podman (or docker when that
# is what the machine has), without a registry when none can be reached.
#
#   images.sh deps    install podman, buildah, podman-compose, debootstrap,
#                     runc, uidmap, slirp4netns, the CNI dnsname plugin and
#                     catatonit (Debian packages), and the
#                     settings podman needs on a host like the development
#                     machines (see below)
#   images.sh base    make the base images the Dockerfiles name, as local
#                     stand-ins from Debian packages, where they cannot be pulled
#   images.sh build   build the nine images, tagged as the chart names them
#   images.sh app-version  print the chart's appVersion (the default TAG)
#
# Run as root (podman's rootful store). PREFIX and TAG (nova and the chart's
# appVersion) name the images: PREFIX/<service>:TAG.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-nova}
# app_version is the chart's appVersion, the tag the chart's images default
# to (make's IMAGE_TAG asks for it: images.sh app-version).
app_version() {
	sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$root/helm/nova/Chart.yaml"
}
TAG=${TAG:-$(app_version)}
SERVICES=${SERVICES:-"nova graph-engine sandbox audit gateway input-analyzer code-generator code-validator output-validator"}
STANDIN_LABEL=io.nova.local-stand-in

# The bases the Dockerfiles name, exactly.
DEBIAN=docker.io/library/debian:bookworm-slim
GOLANG=docker.io/library/golang:1.26-bookworm
DISTROLESS=gcr.io/distroless/static-debian12:nonroot
# The images deploy/compose.yaml runs for NATS and the store.
NATS=docker.io/library/nats:2.15.2-alpine
MONGO=docker.io/library/mongo:7.0

log() { printf '%s %s\n' "$(date +%T)" "$*"; }
die() { printf 'images.sh: %s\n' "$*" >&2; exit 1; }

engine() {
	if command -v podman >/dev/null; then
		# runc and cgroupfs: crun refuses the hybrid cgroup v1/v2 layout some
		# hosts have ("cgroups in hybrid mode not supported").
		echo "podman --runtime runc --cgroup-manager cgroupfs"
	elif docker info >/dev/null 2>&1; then
		echo docker
	else
		die "no container engine: run 'make deps-images' (podman) or start a Docker engine"
	fi
}

cmd_deps() {
	# PACKAGES is the Makefile's IMAGE_DEB_PACKAGES. slirp4netns: the
	# network of a container with a user namespace of its own; uidmap:
	# that namespace's id ranges; the CNI dnsname plugin: containers find
	# each other by name on a network (compose's services); catatonit:
	# the init of a pod's infra container (kube play).
	local want missing=()
	read -r -a want <<<"${PACKAGES:-podman buildah podman-compose debootstrap runc uidmap slirp4netns golang-github-containernetworking-plugin-dnsname catatonit}"
	for p in "${want[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		command -v apt-get >/dev/null || die "missing packages: ${missing[*]} (install them with your package manager)"
		log "installing ${missing[*]}"
		apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
	fi
	# Without default_ulimits = [], the runtime's setrlimit(RLIMIT_NOFILE)
	# to podman's default fails in a container that may not raise it.
	local conf=/etc/containers/containers.conf
	if [ ! -e "$conf" ]; then
		log "writing $conf"
		mkdir -p /etc/containers
		cat >"$conf" <<-'EOF'
			# Written by NOVA's deploy/images/images.sh deps. Without this, the
			# runtime's setrlimit(RLIMIT_NOFILE) to podman's default fails on hosts
			# that do not allow raising it ("Operation not permitted").
			[containers]
			default_ulimits = []
		EOF
	elif ! grep -q '^default_ulimits *= *\[\]' "$conf"; then
		log "note: $conf exists without 'default_ulimits = []' under [containers]; add it if containers fail at setrlimit"
	fi
	# --userns=auto (as the chart's hostUsers: false) takes its ranges from
	# the user "containers".
	for f in /etc/subuid /etc/subgid; do
		grep -q '^containers:' "$f" 2>/dev/null || echo 'containers:2147483647:2147483648' >>"$f"
	done
	podman --version
	buildah --version
	podman-compose --version 2>/dev/null | grep -i "podman-compose\|podman-composer" | head -1
	$(engine) info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Store.GraphDriverName}}'
}

# exists NAME: the image is in the local store.
exists() { $(engine) image exists "$1" 2>/dev/null; }

# pull NAME: try the registry once, briefly.
pull() { timeout 30 $(engine) pull -q "$1" >/dev/null 2>&1; }

cmd_base() {
	local e
	e=$(engine)
	work=$(mktemp -d /tmp/nova-base.XXXX)
	trap 'rm -rf "$work"' EXIT

	if exists "$DEBIAN" || pull "$DEBIAN"; then
		log "$DEBIAN: present"
	else
		log "$DEBIAN: not pullable; debootstrap --variant=minbase bookworm (a local stand-in)"
		debootstrap --variant=minbase bookworm "$work/debian" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
			{ tail -20 "$work/debootstrap.log"; die "debootstrap failed"; }
		rm -rf "$work"/debian/var/lib/apt/lists/* "$work"/debian/var/cache/apt/*.bin "$work"/debian/var/cache/apt/archives/*.deb
		tar -C "$work/debian" -c . | $e import --quiet \
			--change "LABEL $STANDIN_LABEL=\"debootstrap --variant=minbase bookworm, built $(date -u +%F)\"" \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'CMD ["bash"]' - "$DEBIAN" >/dev/null
		rm -rf "$work/debian"
	fi

	if exists "$GOLANG" || pull "$GOLANG"; then
		log "$GOLANG: present"
	else
		local goroot
		goroot=$(go env GOROOT)
		log "$GOLANG: not pullable; $DEBIAN with this machine's $(go env GOVERSION) and CA certificates (a local stand-in)"
		mkdir -p "$work/golang/local-ca"
		cp -a "$goroot" "$work/golang/go"
		# The build machine's own CAs (a TLS-inspecting egress proxy's),
		# so that the builder reaches the module proxy as the machine does.
		cp /usr/local/share/ca-certificates/*.crt "$work/golang/local-ca/" 2>/dev/null || true
		cat >"$work/golang/Containerfile" <<-EOF
			FROM $DEBIAN
			COPY local-ca/ /usr/local/share/ca-certificates/
			RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates git \\
			 && rm -rf /var/lib/apt/lists/*
			COPY go /usr/local/go
			ENV GOLANG_VERSION=$(go env GOVERSION) GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
			WORKDIR /go
			LABEL $STANDIN_LABEL="$DEBIAN with $(go env GOVERSION) and the local CAs of the build machine, built $(date -u +%F)"
		EOF
		$e build --network host -q -t "$GOLANG" "$work/golang" >/dev/null
		rm -rf "$work/golang"
	fi

	if exists "$DISTROLESS" || pull "$DISTROLESS"; then
		log "$DISTROLESS: present"
	else
		log "$DISTROLESS: not pullable; a static base with the nonroot user, CA certificates and tzdata (a local stand-in)"
		local d="$work/distroless"
		mkdir -p "$d/rootfs/etc/ssl/certs" "$d/rootfs/usr/share" "$d/rootfs/tmp" "$d/rootfs/home/nonroot"
		cat >"$d/rootfs/etc/passwd" <<-'EOF'
			root:x:0:0:root:/root:/sbin/nologin
			nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
			nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
		EOF
		cat >"$d/rootfs/etc/group" <<-'EOF'
			root:x:0:
			nobody:x:65534:
			nonroot:x:65532:
		EOF
		cp /etc/ssl/certs/ca-certificates.crt "$d/rootfs/etc/ssl/certs/"
		cp -a /usr/share/zoneinfo "$d/rootfs/usr/share/"
		chmod 1777 "$d/rootfs/tmp"
		chown 65532:65532 "$d/rootfs/home/nonroot"
		cat >"$d/Containerfile" <<-EOF
			FROM scratch
			COPY rootfs/ /
			ENV PATH=/usr/local/bin:/usr/bin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
			USER 65532:65532
			WORKDIR /home/nonroot
			LABEL $STANDIN_LABEL="static base: nonroot (65532), CA certificates and tzdata from the build machine, built $(date -u +%F)"
		EOF
		$e build -q -t "$DISTROLESS" "$d" >/dev/null
	fi
	# The images compose runs besides NOVA's: NATS, from the nats-server
	# module the project pins.
	local nats_version
	nats_version=$(cd "$root/pkg/devstack" && go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
	if exists "$NATS" || pull "$NATS"; then
		log "$NATS: present"
	else
		log "$NATS: not pullable; nats-server $nats_version built from its module, on $DEBIAN with wget (a local stand-in)"
		mkdir -p "$work/nats"
		cat >"$work/nats/Containerfile" <<-EOF
			FROM $GOLANG AS build
			RUN --mount=type=cache,target=/go/pkg/mod CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" github.com/nats-io/nats-server/v2@$nats_version
			FROM $DEBIAN
			RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends wget \\
			 && rm -rf /var/lib/apt/lists/*
			COPY --from=build /go/bin/nats-server /usr/local/bin/nats-server
			EXPOSE 4222 6222 8222
			ENTRYPOINT ["nats-server"]
			CMD ["--config", "/etc/nats/nats-server.conf"]
			LABEL $STANDIN_LABEL="nats-server $nats_version from its Go module on $DEBIAN with wget (compose's health check), built $(date -u +%F)"
		EOF
		$e build --network host -q -t "$NATS" "$work/nats" >/dev/null
	fi
	# The store: FerretDB from the module nova dev embeds, as nova-store
	# (pkg/devstack/cmd/nova-store), with its data in /data/db as mongo's.
	if exists "$MONGO" || pull "$MONGO"; then
		log "$MONGO: present"
	else
		local ferretdb_version
		ferretdb_version=$(cd "$root/pkg/devstack" && go list -m -f '{{.Version}}' github.com/FerretDB/FerretDB)
		log "$MONGO: not pullable; FerretDB $ferretdb_version on SQLite (nova-store), on $DEBIAN (a local stand-in)"
		mkdir -p "$work/mongo"
		cat >"$work/mongo/Containerfile" <<-EOF
			FROM $GOLANG AS build
			WORKDIR /src
			ENV CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly
			COPY proto/ proto/
			COPY pkg/ pkg/
			RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \\
			    cd pkg/devstack && go build -trimpath -ldflags="-s -w" -o /out/nova-store ./cmd/nova-store
			FROM $DEBIAN
			RUN groupadd --system --gid 999 mongodb && useradd --system --uid 999 --gid 999 --home-dir /data/db mongodb \\
			 && install -d -o 999 -g 999 /data/db
			COPY --from=build /out/nova-store /usr/local/bin/nova-store
			USER 999:999
			VOLUME /data/db
			EXPOSE 27017
			ENTRYPOINT ["nova-store"]
			CMD ["-listen", "0.0.0.0:27017", "-data", "/data/db"]
			LABEL $STANDIN_LABEL="FerretDB $ferretdb_version on SQLite (pkg/devstack/cmd/nova-store) on $DEBIAN; no mongosh: health check with nova-store ping; built $(date -u +%F)"
		EOF
		$e build --network host -q -f "$work/mongo/Containerfile" -t "$MONGO" "$root" >/dev/null
	fi
	# No prune: the image store holds the operator's images and the build
	# cache of NOVA's own (a stand-in is built only when its tag is absent,
	# so none is left dangling here).
	$e images --format '{{.Repository}}:{{.Tag}} {{.Size}} {{.Labels}}' | grep -E "debian|golang|distroless|nats|mongo" |
		sed "s/map\[\(.*\)\]/\1/"
}

# revision is the commit the images are built from, -dirty with changes
# not committed.
revision() {
	local r
	r=$(git -C "$root" rev-parse HEAD 2>/dev/null) || { echo unknown; return; }
	git -C "$root" diff --quiet HEAD 2>/dev/null || r="$r-dirty"
	echo "$r"
}

cmd_build() {
	local e
	e=$(engine)
	for b in "$DEBIAN" "$GOLANG" "$DISTROLESS"; do
		exists "$b" || die "base image $b is missing: run 'make base-images' first"
	done
	cd "$root"
	for s in $SERVICES; do
		local start=$SECONDS
		log "build $PREFIX/$s:$TAG (services/$s/Dockerfile)"
		# podman builds in Docker's image format: OCI's has no HEALTHCHECK, and
		# podman would drop it (docker builds in its own format always).
		local format=()
		[[ $e == podman* ]] && format=(--format docker)
		$e build --network host --pull=never -q "${format[@]}" -f "services/$s/Dockerfile" -t "$PREFIX/$s:$TAG" \
			--build-arg VERSION="$TAG" --build-arg REVISION="$(revision)" . >/dev/null ||
			die "building $PREFIX/$s:$TAG failed (rerun without -q to see it: $e build -f services/$s/Dockerfile .)"
		log "built $PREFIX/$s:$TAG in $((SECONDS - start)) s"
	done
	$e images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep "^localhost/$PREFIX/\|^$PREFIX/" | sort
}

case "${1:-}" in
deps) cmd_deps ;;
base) cmd_base ;;
build) cmd_build ;;
app-version) app_version ;;
*) die "usage: images.sh deps|base|build|app-version" ;;
esac
