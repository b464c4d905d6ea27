// Layout: a long config path elides (its whole path on hover) instead of widening the panel and
// pushing its File.../Open... buttons out; Play/Pause keeps one width, so the step bar does not
// shift as it toggles.
#include <gtest/gtest.h>

#include <QApplication>
#include <QDir>
#include <QToolButton>
#include <filesystem>
#include <fstream>

#include "gui/main_window.hpp"
#include "gui/settings.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

std::string long_directory() {
  std::filesystem::path path = std::filesystem::temp_directory_path();
  for (int i = 0; i < 4; ++i)
    path /= "a_rather_long_directory_name_for_a_config_file_" + std::to_string(i);
  std::filesystem::create_directories(path);
  return path.string();
}

TEST(Layout, LongPathsElideAndButtonsKeepTheirWidth) {
  MainWindow window(walkthrough_settings(), false);
  window.resize(1400, 900);
  window.show();
  ConfigPanel& panel = window.config_panel();
  const std::string directory = long_directory();
  const std::string config = directory + "/ds_config_with_a_long_name.json";
  std::ofstream(config)
      << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})";
  ASSERT_TRUE(panel.load_deepspeed_file(QString::fromStdString(config)));
  EXPECT_EQ(panel.deepspeed().text(), "ds_config_with_a_long_name.json");
  EXPECT_EQ(panel.deepspeed().toolTip().toStdString(), config);
  const std::string model = directory + "/gpt2_config_with_a_long_name.json";
  std::filesystem::copy_file(std::string(ZEROLENS_TEST_DATA) + "/hf/gpt2.json", model,
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_TRUE(panel.load_model_file(QString::fromStdString(model)));
  EXPECT_EQ(panel.model().currentText().toStdString(), model);
  // What forces the panel's width: the label does not ask for the whole path.
  EXPECT_LT(panel.deepspeed().minimumSizeHint().width(), 250)
      << panel.deepspeed().minimumSizeHint().width();
  QToolButton& play = window.step_bar().play_button();
  const int play_width = play.width();
  window.step_bar().toggle_play();
  QApplication::processEvents();  // the layout settles the new text's width
  EXPECT_EQ(play.text(), "Pause");
  EXPECT_EQ(play.width(), play_width);
  window.step_bar().toggle_play();
  QApplication::processEvents();
  EXPECT_EQ(play.text(), "Play");
  EXPECT_EQ(play.width(), play_width);
}

}  // namespace
}  // namespace zerolens::gui
