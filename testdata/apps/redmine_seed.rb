# Seeds a Redmine database (run with Redmine's `bin/rails runner`): an
# admin who may use the API, 3 public projects and 150 issues in each, with
# journals, so that Redmine's pages (issue lists, an issue, a project's
# activity) have real rows to render. Idempotent: a seeded database is left.
exit if Project.where(identifier: "proj-0").exists?

# No mail: its jobs run on threads of their own and would lock SQLite.
Setting.notified_events = []
ActionMailer::Base.perform_deliveries = false
ActiveJob::Base.queue_adapter = :inline
admin = User.find_by(login: "admin")
admin.update_columns(status: User::STATUS_ACTIVE, must_change_passwd: false)
Setting.rest_api_enabled = "1"
Setting.login_required = "0"
trackers = Tracker.all.to_a
status = IssueStatus.order(:position).first
priority = IssuePriority.first || IssuePriority.create!(name: "Normal", is_default: true)
words = %w[cache request worker queue timeout render index search export import mail
           report session token account backlog release sprint deploy rollback]
3.times do |p|
  project = Project.create!(name: "Project #{p}", identifier: "proj-#{p}", is_public: true,
                            description: "Seeded project #{p} " + words.rotate(p).join(" "))
  project.trackers = trackers
  project.enabled_module_names = %w[issue_tracking time_tracking news documents files wiki repository boards calendar gantt]
  150.times do |i|
    issue = Issue.new(project: project, tracker: trackers[i % trackers.size], author: admin,
                      status: status, priority: priority,
                      subject: "#{words[i % words.size]} #{words[(i * 7) % words.size]} issue #{p}-#{i}",
                      description: (words.rotate(i).join(" ") + ".\n") * (1 + i % 5))
    issue.save!
    if i % 3 == 0
      issue.reload
      issue.init_journal(admin, "Note on #{i}: " + words.rotate(i * 3).first(6).join(" "))
      issue.done_ratio = (i * 10) % 100
      issue.save!
    end
  end
end
