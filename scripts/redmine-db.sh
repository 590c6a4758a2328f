#!/usr/bin/env bash
# redmine-db.sh prints the path of a SQLite database for Debian's Redmine
# (/usr/share/redmine, the redmine and redmine-sqlite packages), made once
# and kept under ${RBSCOPE_APPS:-/var/cache/rbscope/apps}: Redmine's schema
# (its own migrations), its default data (trackers, statuses, roles) and
# testdata/apps/redmine_seed.rb's projects and issues. The file's name
# holds Redmine's package version and the seed script's hash, so a new
# Redmine or seed makes a new database. Callers copy it before use (Redmine
# writes to it).
set -euo pipefail
root=/usr/share/redmine
here=$(cd "$(dirname "$0")/.." && pwd)
seed=$here/testdata/apps/redmine_seed.rb
[ -f "$root/config/environment.rb" ] || { echo "redmine-db.sh: Debian's redmine is not installed (make deps installs it)" >&2; exit 1; }
version=$(dpkg-query -W -f '${Version}' redmine)
sum=$(sha256sum "$seed" | cut -c1-12)
dir=${RBSCOPE_APPS:-/var/cache/rbscope/apps}
db="$dir/redmine-$version-$sum.sqlite3"
if [ -f "$db" ]; then
  echo "$db"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp "$dir/.redmine-XXXXXX.sqlite3")
trap 'rm -f "$tmp"' EXIT
cd "$root"
export RAILS_ENV=production DATABASE_URL="sqlite3:$tmp" REDMINE_LANG=en
# Migrations and the default data in two runs: in one, the data's models
# keep the column lists they had before the migrations.
bin/rake db:migrate >/dev/null
bin/rake redmine:load_default_data >/dev/null
bin/rails runner "$seed" >/dev/null
chmod 644 "$tmp"
mv "$tmp" "$db"
trap - EXIT
echo "$db"
