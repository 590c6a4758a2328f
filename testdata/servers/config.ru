require_relative "app"
run SERVER_APP
